#!/usr/bin/env bash
# Starts a private containerd 1.7 with NRI enabled (own root, state, sockets and
# NRI socket under DIR), imports the locally built busybox image, and prints the
# containerd PID. Stop it with: kill PID. Same conventions as
# containerd-private.sh, which starts Debian 12's containerd 1.6 (no NRI).
# CONTAINERD-BINARY defaults to the containerd on PATH; take the one that
# containerd17.sh prints. NRI plugins connect to DIR/nri.sock.
# Usage: containerd17-private.sh DIR IMAGE-NAME IMAGE-TAR [CONTAINERD-BINARY]
set -euo pipefail
dir=$1
image=$2
image_tar=$3
containerd=$(realpath "${4:-$(command -v containerd)}")
[[ "$("$containerd" --version)" == *" 1.7."* ]] \
  || { echo "containerd17-private: $containerd is not containerd 1.7; see containerd17.sh" >&2; exit 1; }
# containerd looks its shim up on PATH before next to itself: the package's
# bin directory goes first, or Debian 12's 1.6 shim would run the containers.
# The package has no runc, so the shim runs Debian 12's (1.1.5), which
# containerd 1.7 supports. ctr is the one from the same package.
bindir=$(dirname "$containerd")
ctr=$bindir/ctr
mkdir -p "$dir/root" "$dir/state" "$dir/nri-plugins" "$dir/nri-conf"
sock="$dir/containerd.sock"

# As in containerd-private.sh: restrict_oom_score_adj because these VMs refuse
# a negative oom_score_adj; the local busybox image as the sandbox image, since
# no registry is reachable; the native snapshotter where overlayfs is missing.
# NRI is off by default in 1.7; the keys are those of pkg/nri/config.go at
# v1.7.24. disable_connections = false lets an externally started plugin (the
# proxy in NRI mode) connect; plugin_path is where plugins started by
# containerd itself would live. The opt plugin puts its bin directory first on
# PATH, ahead of ours; by default that is the shared /opt/containerd/bin.
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
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = "$dir/nri.sock"
  plugin_path = "$dir/nri-plugins"
  plugin_config_path = "$dir/nri-conf"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
CONF

PATH="$bindir:$PATH" "$containerd" --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 &
pid=$!
# The CRI plugin opens the NRI socket after the gRPC socket answers, so wait
# for both: a test that connects at once would otherwise race it.
for _ in $(seq 1 100); do
  [[ -S "$sock" && -S "$dir/nri.sock" ]] && "$ctr" --address "$sock" version >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/containerd.log" >&2; exit 1; }
  sleep 0.1
done
[[ -S "$dir/nri.sock" ]] || { echo "containerd17-private: no $dir/nri.sock after 10 s" >&2; kill "$pid"; exit 1; }
"$ctr" --address "$sock" -n k8s.io images import --no-unpack=false "$image_tar" >"$dir/import.log" 2>&1 \
  || { cat "$dir/import.log" >&2; kill "$pid"; exit 1; }
echo "$pid"
