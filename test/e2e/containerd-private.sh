#!/usr/bin/env bash
# Starts a private containerd (own root, state and socket under DIR) for the
# end-to-end tests and the demo, imports the locally built busybox image, and
# prints the containerd PID. Stop it with: kill PID.
# Usage: containerd-private.sh DIR IMAGE-NAME IMAGE-TAR
set -euo pipefail
dir=$1
image=$2
image_tar=$3
mkdir -p "$dir/root" "$dir/state"
sock="$dir/containerd.sock"

# restrict_oom_score_adj: these VMs refuse a negative oom_score_adj, which the
# CRI plugin gives sandboxes by default. The sandbox image is the local busybox
# image, since no registry is reachable. The native snapshotter works on any
# filesystem; overlayfs needs a kernel that allows it in this environment.
snapshotter=overlayfs
if ! grep -qw overlay /proc/filesystems; then snapshotter=native; fi
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
CONF

containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  [[ -S "$sock" ]] && ctr --address "$sock" version >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/containerd.log" >&2; exit 1; }
  sleep 0.1
done
ctr --address "$sock" -n k8s.io images import --no-unpack=false "$image_tar" >"$dir/import.log" 2>&1 \
  || { cat "$dir/import.log" >&2; kill "$pid"; exit 1; }
echo "$pid"
