#!/usr/bin/env bash
# Starts a private containerd (own root, state and sockets under DIR) for the
# end-to-end tests and the demo, imports the locally built busybox image, and
# prints the containerd PID. Stop it with: kill PID.
# CONTAINERD-BINARY defaults to the containerd on PATH (Debian 12's 1.6); a
# containerd 1.7 or 2.x (the ones containerd17.sh and containerd2.sh print)
# is started with NRI on, its socket DIR/nri.sock, its
# plugin_request_timeout $CRIHOOK_NRI_REQUEST_TIMEOUT (default 2s,
# containerd's own default). 1.6 and 1.7 get a `version = 2` config, 2.x a
# `version = 3` one (the CRI settings under io.containerd.cri.v1.runtime and
# io.containerd.cri.v1.images), the same settings in each.
# Usage: containerd-private.sh DIR IMAGE-NAME IMAGE-TAR [CONTAINERD-BINARY]
set -euo pipefail
dir=$1
image=$2
image_tar=$3
containerd=$(realpath "${4:-$(command -v containerd)}")
# containerd looks its shim up on PATH before next to itself: the binary's
# own directory goes first, or another containerd's shim would run the
# containers (Debian 13's package has no runc: its shim runs Debian 12's,
# 1.1.5, which containerd 1.7 supports). ctr is the one from the same place.
bindir=$(dirname "$containerd")
ctr=$bindir/ctr
nri=false
series=1
case "$("$containerd" --version)" in
  *" 1.7."*) nri=true ;;
  *" 2."*) nri=true series=2 ;;
esac
mkdir -p "$dir/root" "$dir/state"
sock="$dir/containerd.sock"

# restrict_oom_score_adj: these VMs refuse a negative oom_score_adj, which the
# CRI plugin gives sandboxes by default. The sandbox image is the local busybox
# image, since no registry is reachable. The native snapshotter works on any
# filesystem; overlayfs needs a kernel that allows it in this environment. The
# opt plugin puts its bin directory first on PATH, ahead of ours; by default
# that is the shared /opt/containerd/bin.
snapshotter=overlayfs
if ! grep -qw overlay /proc/filesystems; then snapshotter=native; fi
if [[ $series == 1 ]]; then
  cat >"$dir/config.toml" <<CONF
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$dir/containerd-ttrpc.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$image"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snapshotter"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$dir/cni-bin"
    conf_dir = "$dir/cni-conf"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
CONF
else
  # The keys of internal/cri/config/config.go at v2.1.9: the sandbox image is
  # pinned_images' "sandbox", the snapshotter an images setting, the CNI
  # directories bin_dirs (bin_dir is deprecated in 2.1).
  cat >"$dir/config.toml" <<CONF
version = 3
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$dir/containerd-ttrpc.sock"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "$snapshotter"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$image"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$dir/cni-bin"]
    conf_dir = "$dir/cni-conf"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
CONF
fi
if $nri; then
  # NRI is off by default in 1.7 (on in 2.x); the keys are those of
  # pkg/nri/config.go at v1.7.24, internal/nri/config.go at v2.1.9. disable_connections = false lets an externally started plugin
  # (crihookd in NRI mode) connect; plugin_path is where plugins started by
  # containerd itself would live.
  mkdir -p "$dir/nri-plugins" "$dir/nri-conf"
  cat >>"$dir/config.toml" <<CONF
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "$dir/nri.sock"
  plugin_path = "$dir/nri-plugins"
  plugin_config_path = "$dir/nri-conf"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "${CRIHOOK_NRI_REQUEST_TIMEOUT:-2s}"
CONF
fi

PATH="$bindir:$PATH" "$containerd" --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
pid=$!
# The CRI plugin opens the NRI socket after the gRPC socket answers: with NRI,
# wait for both, or a test that connects at once would race it.
ready() { [[ -S "$sock" ]] && { ! $nri || [[ -S "$dir/nri.sock" ]]; }; }
for _ in $(seq 1 100); do
  ready && "$ctr" --address "$sock" version >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/containerd.log" >&2; exit 1; }
  sleep 0.1
done
ready || { echo "containerd-private: $dir not ready after 10 s" >&2; kill "$pid"; exit 1; }
"$ctr" --address "$sock" -n k8s.io images import --no-unpack=false "$image_tar" >"$dir/import.log" 2>&1 \
  || { cat "$dir/import.log" >&2; kill "$pid"; exit 1; }
echo "$pid"
