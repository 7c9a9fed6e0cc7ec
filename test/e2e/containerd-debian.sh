#!/usr/bin/env bash
# Fetches a Debian suite's containerd package into CACHE_DIR and prints the
# path of its containerd binary: Debian 13 (trixie)'s 1.7 and Debian
# unstable (sid)'s 2.x, for the NRI suites (NRI needs containerd >= 1.7 and
# Debian 12 ships 1.6). The package is unpacked (dpkg -x), never installed:
# the system's containerd, dpkg database and apt configuration stay as they
# are. With the cache in place it uses no network; remove CACHE_DIR to take
# a newer upload. Run as root on Debian 12 with deb.debian.org reachable.
# Usage: containerd-debian.sh SUITE SERIES CACHE_DIR
#   SUITE   trixie or sid (the apt suite the package comes from)
#   SERIES  the upstream version it must have, as a prefix: "1.7" or "2"
# containerd17.sh and containerd2.sh call it for the two the tests run.
set -euo pipefail
suite=$1
series=$2
cache=$(realpath -m "$3")
case $suite in
  trixie | sid) ;;
  *) echo "containerd-debian: suite: expected trixie or sid, got '$suite'" >&2; exit 2 ;;
esac
[[ $series =~ ^[0-9]+(\.[0-9]+)?$ ]] \
  || { echo "containerd-debian: series: expected N or N.M, got '$series'" >&2; exit 2; }
root=$cache/root
bin=$root/usr/bin/containerd
mkdir -p "$cache"
# Meson runs tests in parallel: two fetches into one cache would race.
exec 9>"$cache/lock"
flock 9

# `containerd --version` names the upstream version: "containerd
# github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1" (1.7),
# "containerd github.com/containerd/containerd/v2 2.1.9+unknown " (2.1). The
# cache is good if the binary runs here and prints what it printed when it was
# unpacked (written last, to "version"); a half-unpacked tree is fetched again.
# "deb-version" keeps the package's version.
if [[ -f "$cache/version" && "$("$bin" --version 2>/dev/null)" == "$(<"$cache/version")" ]]; then
  echo "$bin"
  exit 0
fi

# Trixie's and sid's InRelease are signed by the trixie keys and, today, also
# by the bookworm archive key; only the former are sure to stay. Bookworm's
# debian-archive-keyring has them from 2023.3+deb12u2 (Debian 12.11) on; an
# older image has to upgrade it.
if [[ ! -e /usr/share/keyrings/debian-archive-trixie-automatic.gpg ]]; then
  apt-get update -qq >&2
  apt-get install -y -qq debian-archive-keyring >&2
fi

# A private apt tree: its own sources, lists, cache and an empty dpkg status,
# so neither the system's sources nor its installed containerd 1.6 play a part
# and the system's lists stay untouched. The system's apt.conf.d still applies
# (a CI proxy would live there), except that: the update hooks, which tell
# PackageKit/AppStream about the system's lists, are cleared; a failed fetch is
# an error rather than a warning and a later "Unable to locate package"; and
# signature checks are on whatever it says. apt verifies InRelease against
# signed-by, Packages against InRelease, and the .deb against Packages.
apt_dir=$cache/apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/deb"
: >"$apt_dir/status"
echo "deb [arch=$(dpkg --print-architecture) signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
  "http://deb.debian.org/debian $suite main" >"$apt_dir/sources.list"
cat >"$apt_dir/apt.conf" <<CONF
Dir::Etc::SourceList "$apt_dir/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State "$apt_dir";
Dir::State::status "$apt_dir/status";
Dir::Cache "$apt_dir";
Acquire::Languages "none";
APT::Update::Error-Mode "any";
Acquire::AllowInsecureRepositories "false";
Acquire::AllowDowngradeToInsecureRepositories "false";
APT::Get::AllowUnauthenticated "false";
#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke-Success;
#clear APT::Update::Post-Invoke;
CONF
apt-get -c "$apt_dir/apt.conf" -qq update >&2
# apt downloads as the _apt user, which must be able to write the directory.
if id _apt >/dev/null 2>&1; then chown _apt "$apt_dir/deb"; fi
(cd "$apt_dir/deb" && apt-get -c "$apt_dir/apt.conf" -qq download "containerd/$suite" >&2)
deb=$(echo "$apt_dir"/deb/containerd_*.deb)
version=$(dpkg-deb -f "$deb" Version)
# The upstream version: no epoch, up to Debian's "~ds1" / "+ds1" and revision.
upstream=${version#*:}
upstream=${upstream%%[~+-]*}

rm -rf "$root" "$cache/version" "$cache/deb-version"
dpkg -x "$deb" "$root"
# The Go binaries link only libc (GLIBC_2.34 at most, 1.7's and 2.1's alike),
# which bookworm has; failing here means they need something newer.
line=$("$bin" --version)
echo "$line" >&2
[[ $upstream == "$series".* && "$line " == *" $upstream"[+~" "]* ]] \
  || { echo "containerd-debian: $deb (version $version): expected containerd $series.x, it says: $line" >&2; exit 1; }
for tool in ctr containerd-shim-runc-v2; do
  [[ -x "$root/usr/bin/$tool" ]] || { echo "containerd-debian: $deb has no usr/bin/$tool" >&2; exit 1; }
done
rm -rf "$apt_dir"
echo "$version" >"$cache/deb-version"
echo "$line" >"$cache/version"
echo "$bin"
