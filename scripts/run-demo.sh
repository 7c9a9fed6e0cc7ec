#!/usr/bin/env bash
# crihook's main job on a fresh Debian machine: installs the dependencies,
# builds, starts crihookd in front of a real containerd (a private one when
# none runs at /run/containerd/containerd.sock) and runs a pod through it.
# Interactive: crihookd keeps serving until Ctrl-C. Non-interactive (no tty,
# or --once): stops after the demo pod.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
once=0
[[ "${1:-}" == "--once" || ! -t 0 ]] && once=1

bash scripts/build.sh
[[ $(id -u) -eq 0 ]] || { echo "run-demo: containerd and runc need root" >&2; exit 1; }

demo=/tmp/crihook-demo
image=docker.io/library/busybox:crihook
mkdir -p "$demo"
pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
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

listen=/run/crihook/crihook.sock
# One built-in hook, for pods annotated crihook.demo/hooks=on (the demo pod):
# it sets an env var, which the demo then reads inside the container.
cat >"$demo/crihookd.toml" <<TOML
[hooks]
state_dir = "$demo/state"

[[hook]]
name = "demo-env"
builtin = "static"
[hook.settings]
pod_annotations = { "crihook.demo/hooks" = "on" }
[hook.settings.adjustment]
env = [{ key = "SET_BY_HOOK", value = "demo-env, a built-in static hook" }]
TOML
echo "== starting crihookd on $listen, in front of unix://$backend, config $demo/crihookd.toml"
build/tools/crihookd --config "$demo/crihookd.toml" --listen "$listen" --backend "unix://$backend" --log-level info 2> >(sed 's/^/   crihookd| /' >&2) &
pids+=($!)
for _ in $(seq 1 100); do [[ -S "$listen" ]] && break; sleep 0.05; done

ctl() { echo "\$ crihookctl $*" >&2; build/tools/crihookctl/crihookctl -r "unix://$listen" "$@"; }
cat >"$demo/pod.json" <<JSON
{"metadata":{"name":"demo","namespace":"default","uid":"crihook-demo-1"},
 "annotations":{"crihook.demo/hooks":"on"},
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
ctl exec "$ctr_id" sh -c 'echo "$GREETING"; echo "SET_BY_HOOK=$SET_BY_HOOK"'
ctl pods
ctl ps
ctl explain --state-dir "$demo/state" "$ctr_id"
ctl stop "$ctr_id" >/dev/null
ctl rm "$ctr_id" >/dev/null
ctl stopp "$pod" >/dev/null
ctl rmp "$pod" >/dev/null
echo "== the pod went through crihookd: one crihookd log line per lifecycle call above"

if [[ $once -eq 0 ]]; then
  echo "== crihookd serves $listen; point kubelet at unix://$listen (see README). Ctrl-C stops."
  wait "${pids[-1]}"
fi
