#!/usr/bin/env bash
# Fetches Debian 13 (trixie)'s containerd 1.7 into CACHE_DIR and prints the path
# of its containerd binary. NRI needs containerd >= 1.7 and Debian 12 ships 1.6,
# so the trixie package is unpacked (dpkg -x), never installed: the system's
# containerd, dpkg database and apt configuration stay as they are.
# With the cache in place it uses no network; remove CACHE_DIR to take a newer
# trixie upload. Run as root on Debian 12 with deb.debian.org reachable.
# Usage: containerd17.sh CACHE_DIR
set -euo pipefail
cache=$(realpath -m "$1")
root=$cache/root
bin=$root/usr/bin/containerd
mkdir -p "$cache"
# Meson runs tests in parallel: two fetches into one cache would race.
exec 9>"$cache/lock"
flock 9

# `containerd --version` ends with the Debian version, as in "containerd
# github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1". The cache
# is good if the binary runs here and reports the version written, last, when it
# was unpacked; a half-unpacked tree is fetched again.
if [[ -f "$cache/version" && "$("$bin" --version 2>/dev/null)" == *" $(<"$cache/version")" ]]; then
  echo "$bin"
  exit 0
fi

# Trixie's InRelease is signed by the trixie keys and, today, also by the
# bookworm archive key; only the former are sure to stay. Bookworm's
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
  "http://deb.debian.org/debian trixie main" >"$apt_dir/sources.list"
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
(cd "$apt_dir/deb" && apt-get -c "$apt_dir/apt.conf" -qq download containerd/trixie >&2)
deb=$(echo "$apt_dir"/deb/containerd_*.deb)
version=$(dpkg-deb -f "$deb" Version)

rm -rf "$root" "$cache/version"
dpkg -x "$deb" "$root"
# The Go binaries link only libc (GLIBC_2.34 at most), which bookworm has;
# failing here means they need something newer.
"$bin" --version >&2
[[ "$("$bin" --version)" == *" 1.7."*" $version" ]] \
  || { echo "containerd17: $deb: expected containerd 1.7.x, version $version" >&2; exit 1; }
for tool in ctr containerd-shim-runc-v2; do
  [[ -x "$root/usr/bin/$tool" ]] || { echo "containerd17: $deb has no usr/bin/$tool" >&2; exit 1; }
done
rm -rf "$apt_dir"
echo "$version" >"$cache/version"
echo "$bin"
