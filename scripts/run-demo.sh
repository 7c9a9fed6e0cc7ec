#!/usr/bin/env bash
# crihook's main job on a fresh Debian machine: installs the dependencies it
# needs, builds crihookd and crihookctl (only those), starts crihookd in
# front of a real containerd (a private one when none runs at
# /run/containerd/containerd.sock) and runs a pod through it.
# Interactive: crihookd keeps serving until Ctrl-C. Non-interactive (no tty,
# or --once): stops after the demo pod.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
once=0
[[ "${1:-}" == "--once" || ! -t 0 ]] && once=1

bash scripts/build.sh demo
[[ $(id -u) -eq 0 ]] || { echo "run-demo: containerd and runc need root" >&2; exit 1; }

demo=/tmp/crihook-demo
image=docker.io/library/busybox:crihook
mkdir -p "$demo"
pids=()
# crihookd's default socket directory: what the demo's crihookd leaves there
# (its lock file) goes with it when the demo made the directory, so the
# machine is as it was (the debian_package test refuses a /run/crihook
# holding files: purging the package would delete them).
run_dir=/run/crihook
made_run_dir=0
[[ -e $run_dir ]] || made_run_dir=1
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if ((made_run_dir)); then
    rm -f "$run_dir"/crihook.sock "$run_dir"/crihook.sock.lock "$run_dir"/metrics.sock
    rmdir "$run_dir" 2>/dev/null
  fi
}
trap cleanup EXIT

test/e2e/make-busybox-image.sh "$demo/busybox.tar" "$image"
system_sock=/run/containerd/containerd.sock
backend=""
if ctr --address "$system_sock" version >/dev/null 2>&1; then
  # The demo pod needs the runtime's sandbox (pause) image, and no registry
  # may be reachable: use the running containerd only if it has that image.
  sandbox_image=$(build/tools/crihookctl/crihookctl -r "unix://$system_sock" info 2>/dev/null \
    | sed -n 's/.*\\"sandboxImage\\": *\\"\([^\\]*\)\\".*/\1/p' | head -n1)
  if [[ -n "$sandbox_image" ]] && ctr --address "$system_sock" -n k8s.io images ls -q | grep -qxF "$sandbox_image"; then
    echo "== using the running containerd at $system_sock"
    backend=$system_sock
    ctr --address "$backend" -n k8s.io images import "$demo/busybox.tar" >/dev/null
  else
    echo "== the running containerd lacks its sandbox image (${sandbox_image:-unknown}); using a private one"
  fi
fi
if [[ -z "$backend" ]]; then
  echo "== starting a private containerd under $demo/ctd"
  rm -rf "$demo/ctd"
  pids+=("$(test/e2e/containerd-private.sh "$demo/ctd" "$image" "$demo/busybox.tar")")
  backend=$demo/ctd/containerd.sock
fi

listen=$run_dir/crihook.sock
# The device hooks need GPUs and RDMA NICs; this machine may have none, so the
# demo gives crihookd a DGX-shaped fixture topology and a device tree of
# mknod'd stand-ins (the numbers of /dev/zero and /dev/null). Demo only: a
# real node leaves [topology] root and device_root at their defaults.
rm -rf "$demo/fixtures" "$demo/dev" "$demo/device-actions.log"
bash test/topology/make-fixtures.sh "$demo/fixtures" >/dev/null
mkdir -p "$demo/dev/infiniband"
for n in nvidia0 infiniband/uverbs6; do mknod -m 0666 "$demo/dev/$n" c 1 5; done
for n in nvidiactl nvidia-uvm infiniband/rdma_cm; do mknod -m 0666 "$demo/dev/$n" c 1 3; done
# Hooks: a static one for pods annotated crihook.demo/hooks=on (an env var the
# demo reads inside the container), the device hooks applying the pod's
# Koordinator allocation, and device init/cleanup actions (here: echo to a log).
cat >"$demo/crihookd.toml" <<TOML
[hooks]
state_dir = "$demo/state"
hookserver_dir = "$demo/hookserver.d"

[topology]
root = "$demo/fixtures/dgx"

[[hook]]
name = "demo-env"
builtin = "static"
[hook.settings]
pod_annotations = { "crihook.demo/hooks" = "on" }
[hook.settings.adjustment]
env = [{ key = "SET_BY_HOOK", value = "demo-env, a built-in static hook" }]

[[hook]]
name = "gpu"
builtin = "gpu"
settings = { device_root = "$demo/dev" }

[[hook]]
name = "rdma"
builtin = "rdma"
settings = { device_root = "$demo/dev" }

[[hook]]
name = "cpuset"
builtin = "cpuset"

[[hook]]
name = "devices"
builtin = "device-lifecycle"
timeout = "30s"
[hook.settings]
device_root = "$demo/dev"
gpu = { init = [{ command = ["/bin/sh", "-c", "echo \\"\$0\\" >> $demo/device-actions.log", "init {type} {uuid} of {pod_namespace}/{pod_name}"] }], cleanup = [{ command = ["/bin/sh", "-c", "echo \\"\$0\\" >> $demo/device-actions.log", "cleanup {type} {uuid} of {pod_namespace}/{pod_name}"] }] }
rdma = { init = [{ builtin = "check-node" }] }
TOML
echo "== starting crihookd on $listen, in front of unix://$backend, config $demo/crihookd.toml"
build/tools/crihookd --config "$demo/crihookd.toml" --listen "$listen" --backend "unix://$backend" --log-level info 2> >(sed 's/^/   crihookd| /' >&2) &
pids+=($!)
for _ in $(seq 1 100); do [[ -S "$listen" ]] && break; sleep 0.05; done

ctl() { echo "\$ crihookctl $*" >&2; build/tools/crihookctl/crihookctl -r "unix://$listen" "$@"; }
cat >"$demo/pod.json" <<JSON
{"metadata":{"name":"demo","namespace":"default","uid":"crihook-demo-1"},
 "annotations":{"crihook.demo/hooks":"on",
  "scheduling.koordinator.sh/device-allocated":"{\\"gpu\\":[{\\"minor\\":0}],\\"rdma\\":[{\\"minor\\":0,\\"id\\":\\"0000:1c:00.0\\",\\"extension\\":{\\"vfs\\":[{\\"minor\\":1,\\"busID\\":\\"0000:1c:00.3\\"}]}}]}",
  "scheduling.koordinator.sh/resource-status":"{\\"cpuset\\":\\"0\\"}"},
 "log_directory":"$demo/logs","linux":{"security_context":{"namespace_options":{"network":"NODE"}}}}
JSON
cat >"$demo/container.json" <<JSON
{"metadata":{"name":"hello"},"image":{"image":"$image"},
 "command":["/bin/sleep","3600"],"envs":[{"key":"GREETING","value":"hello from a pod behind crihook"}],
 "log_path":"hello.log","linux":{}}
JSON

ctl version
pod=$(ctl runp "$demo/pod.json")
ctr_id=$(ctl create "$pod" "$demo/container.json" "$demo/pod.json")
ctl start "$ctr_id" >/dev/null
ctl exec "$ctr_id" sh -c 'echo "$GREETING"; echo "SET_BY_HOOK=$SET_BY_HOOK"
  echo "NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES NCCL_IB_HCA=$NCCL_IB_HCA"
  ls /dev/nvidia* /dev/infiniband; grep -E "^(Cpus|Mems)_allowed_list" /proc/self/status'
ctl pods
ctl ps
ctl explain --state-dir "$demo/state" --root "$demo/fixtures/dgx" "$ctr_id"
ctl stop "$ctr_id" >/dev/null
ctl rm "$ctr_id" >/dev/null
ctl stopp "$pod" >/dev/null
ctl rmp "$pod" >/dev/null
echo "== the pod went through crihookd: one crihookd log line per lifecycle call above"
echo "== device actions run for it (init at RunPodSandbox, cleanup at StopPodSandbox):"
sed 's/^/   /' "$demo/device-actions.log"

if [[ $once -eq 0 ]]; then
  echo "== crihookd serves $listen; point kubelet at unix://$listen (see README.md, "Point kubelet at it"). Ctrl-C stops."
  wait "${pids[-1]}"
fi
