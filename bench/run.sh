#!/usr/bin/env bash
# Runs crihook_bench against the in-process fake runtime and a private
# containerd, with crihookd and, as the baseline a proxy must be measured
# against, a raw byte relay (socat) in the same place.
# Usage: bash bench/run.sh [crihook_bench flags, e.g. --iterations 8000]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
command -v socat >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq socat >/dev/null
[[ $(id -u) -eq 0 ]] || { echo "bench: containerd needs root" >&2; exit 1; }

work=$(mktemp -d /tmp/crihook-benchrun-XXXXXX)
image=docker.io/library/busybox:crihook
ctd_pid=""
cleanup() {
  [[ -z "$ctd_pid" ]] || kill "$ctd_pid" 2>/dev/null || true
  pkill -f "socat UNIX-LISTEN:$work" 2>/dev/null || true
  sleep 0.5
  rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT
test/e2e/make-busybox-image.sh "$work/busybox.tar" "$image"
ctd_pid=$(test/e2e/containerd-private.sh "$work/ctd" "$image" "$work/busybox.tar")

cat >"$work/raw-relay.sh" <<'SH'
#!/usr/bin/env bash
# crihookd's command line, served by socat: a relay that parses nothing.
exec socat "UNIX-LISTEN:$2,fork" "UNIX-CONNECT:${4#unix://}"
SH
chmod +x "$work/raw-relay.sh"

echo "### through crihookd"
build/bench/crihook_bench --crihookd build/tools/crihookd --containerd "$work/ctd/containerd.sock" "$@"
echo
echo "### through a raw byte relay (socat), for comparison"
build/bench/crihook_bench --crihookd "$work/raw-relay.sh" --containerd "$work/ctd/containerd.sock" "$@" \
  | grep -v -e 'resident memory' -e 'CPU time'
