#!/usr/bin/env bash
# Issue 15's bench: what crihookd adds to a unary call and to a pod's
# lifecycle in NRI mode, beside proxy mode and beside no crihookd at all,
# on one private containerd 1.7 with NRI on (test/e2e/containerd17.sh):
#   direct  client -> containerd; no crihookd, no NRI plugin registered
#   proxy   client -> crihookd ([server] mode = "proxy") -> containerd
#   nri     client -> containerd, crihookd ([server] mode = "nri") registered
#           as its NRI plugin, started before the configuration's turn and
#           stopped after it (a registered plugin is called on every pod
#           event, so it must not run during the other two; its start, up to
#           registration, and its stop are timed apart and kept out)
#   null    client -> containerd, bench/nri_null_plugin registered: a plugin
#           subscribed to the same events that answers each at once (the
#           hook's env var on CreateContainer, nothing else); started and
#           stopped as NRI mode's crihookd is. What it adds is the runtime's
#           own NRI path, which any plugin pays: NRI mode less it is
#           crihookd's part, the part to set beside proxy mode's
# crihookd runs the same hook in both modes: the built-in static hook
# setting one environment variable in every container; an untimed warm-up
# pod checks each turn that the container got it (and, direct, did not).
#
# The client is bench/nri_mode_client.go (grpc-go, kubelet's library), built
# here from the CRI proto. The machine is a shared, noisy VM: the four run
# in alternated rounds, in four orders in turn (each first, second, third
# and last once, and each after each of the others once); in each turn
# PODS pod lifecycles (RunPodSandbox, CreateContainer, StartContainer,
# StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox, each
# timed), then the unary call's p50 (ListPodSandbox, kubelet's PLEG call,
# CALLS calls on one connection); and, since a lifecycle's runc work moves it
# by tens of milliseconds from one pod to the next, CYCLES CreateContainer +
# RemoveContainer pairs in one pod, a container never started: no runc
# process, three NRI events, two intercepted calls. Reported: each
# configuration's medians; proxy's, NRI's and the null plugin's added time
# against direct, NRI's against proxy, and crihookd's part of NRI mode (NRI
# less null) against proxy mode's, paired by round (the median difference
# and a bootstrap 95% interval); the steps' shares; crihookd's and
# containerd's CPU time per pod lifecycle and crihookd's per unary call.
#
# Usage: bash bench/nri-mode.sh    (as root; about 6 minutes with defaults
# on the 2-core VM)
#   CRIHOOK_BENCH_NRI_ROUNDS  alternated rounds (12; a multiple of 4 balances the orders)
#   CRIHOOK_BENCH_NRI_PODS    timed pod lifecycles per configuration and round (4)
#   CRIHOOK_BENCH_NRI_CALLS   timed unary calls per configuration and round (2000)
#   CRIHOOK_BENCH_NRI_CYCLES  timed CreateContainer+RemoveContainer pairs per configuration and round (30)
#   CRIHOOK_BENCH_NRI_SAVE    a directory to copy the raw results and the logs into
#   CRIHOOK_BENCH_NO_BUILD    set: use ./build as it is (no scripts/build.sh)
#   CRIHOOK_CONTAINERD17_CACHE  containerd17.sh's cache (/var/cache/crihook-test/containerd17)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "nri-mode: containerd needs root" >&2; exit 1; }
rounds=${CRIHOOK_BENCH_NRI_ROUNDS:-12}
pods=${CRIHOOK_BENCH_NRI_PODS:-4}
calls=${CRIHOOK_BENCH_NRI_CALLS:-2000}
cycles=${CRIHOOK_BENCH_NRI_CYCLES:-30}
for n in "$rounds" "$pods" "$calls" "$cycles"; do
  [[ $n =~ ^[1-9][0-9]{0,5}$ ]] || { echo "nri-mode: expected a count 1..999999, got '$n'" >&2; exit 2; }
done
[[ ${CRIHOOK_BENCH_NO_BUILD:-} ]] || bash scripts/build.sh >/dev/null
command -v curl >/dev/null || { echo "nri-mode: needs curl (crihookd's /readyz)" >&2; exit 1; }
containerd=$(bash test/e2e/containerd17.sh "${CRIHOOK_CONTAINERD17_CACHE:-/var/cache/crihook-test/containerd17}")

work=$(mktemp -d /tmp/crihook-nribench-XXXXXX)
image=docker.io/library/busybox:crihook
ctd=$work/ctd/containerd.sock
client=$work/nri_mode_client
ctd_pid="" proxy_pid="" nri_pid="" null_pid=""
cleanup() {
  # An interrupted run leaves its client making pods: this shell's own
  # children (the client, the crihookds) end first.
  pkill -TERM -P $$ 2>/dev/null || true
  sleep 0.3
  # Then the pods left behind, so their shims and containers end too.
  if [[ -n "$ctd_pid" && -x "$client" ]]; then
    "$client" -endpoint "$ctd" cleanup >/dev/null 2>&1 ||
      "$client" -endpoint "$ctd" cleanup >/dev/null 2>&1 || true
  fi
  local pid any alive=()
  for pid in $null_pid $nri_pid $proxy_pid $ctd_pid; do
    kill "$pid" 2>/dev/null && alive+=("$pid")
  done
  # Up to 5 s for them to end; containerd is not this shell's child
  # (containerd-private.sh started it), so it cannot be waited for.
  for _ in $(seq 1 50); do
    any=""
    for pid in "${alive[@]}"; do kill -0 "$pid" 2>/dev/null && any=1; done
    [[ $any ]] || break
    sleep 0.1
  done
  rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT

# The client: the CRI proto's Go code, made as test/e2e/gocri/build.sh makes
# it (protoc-gen-go 1.3, grpc-go 1.33 from Debian, GOPATH mode); the build
# cache stays in build/ between runs.
gopath=$work/gopath
mkdir -p "$gopath/src/crihook/cri" "$gopath/src/crihook/nri_mode_client" build/bench/nri-mode-gocache
gocache=$(realpath build/bench/nri-mode-gocache)
protoc -I cri-api --plugin=protoc-gen-go="$(command -v protoc-gen-go)" \
  --go_out=plugins=grpc,Mruntime_v1.proto=crihook/cri:"$gopath/src/crihook/cri" runtime_v1.proto
cp bench/nri_mode_client.go "$gopath/src/crihook/nri_mode_client/main.go"
(cd "$gopath/src/crihook/nri_mode_client" &&
  GOPATH="$gopath:/usr/share/gocode" GO111MODULE=off GOCACHE="$gocache" GOFLAGS='' go build -o "$client" .) 2>&1 | sed 's/^/nri-mode: go build: /' >&2
[[ -x "$client" ]] || exit 1
# crihookd copied: a build relinking it during the run does not change it.
cp build/tools/crihookd "$work/crihookd"
cp build/bench/nri_null_plugin "$work/nri_null_plugin"

test/e2e/make-busybox-image.sh "$work/busybox.tar" "$image"
# In a session of its own: a Ctrl-C (SIGINT to the whole process group)
# must leave it up for cleanup to remove the pods, or their shims and
# containers outlive the run.
ctd_pid=$(setsid test/e2e/containerd-private.sh "$work/ctd" "$image" "$work/busybox.tar" "$containerd")
mkdir -p "$work/logs" "$work/proxy" "$work/nri"

# One hook, both modes: the static built-in hook on PreCreateContainer.
hook='[[hook]]
name = "bench-env"
builtin = "static"
[hook.settings.adjustment]
env = [{ key = "CRIHOOK_BENCH", value = "hooked" }]'
cat >"$work/proxy/crihookd.toml" <<TOML
[server]
mode = "proxy"
listen = "$work/proxy/crihook.sock"
[backend]
endpoint = "unix://$ctd"
[hooks]
state_dir = "$work/proxy/state"
hookserver_dir = ""
$hook
TOML
# listen: not served in NRI mode; the metrics socket (/readyz) goes beside it.
cat >"$work/nri/crihookd.toml" <<TOML
[server]
mode = "nri"
listen = "$work/nri/crihook.sock"
[nri]
socket_path = "$work/ctd/nri.sock"
plugin_request_timeout = "2s"
[backend]
endpoint = "unix://$ctd"
[hooks]
state_dir = "$work/nri/state"
hookserver_dir = ""
$hook
TOML

"$work/crihookd" --config "$work/proxy/crihookd.toml" --log-level warn 2>>"$work/proxy/crihookd.log" &
proxy_pid=$!
for _ in $(seq 1 100); do
  [[ -S "$work/proxy/crihook.sock" ]] && break
  kill -0 "$proxy_pid" 2>/dev/null || { cat "$work/proxy/crihookd.log" >&2; exit 1; }
  sleep 0.05
done

raw=$work/results.txt
now_us() { echo $(($(date +%s%N) / 1000)); }
# NRI mode's crihookd, started and ready: registered with containerd, as its
# /readyz says. The time from exec to ready goes to the results.
nri_start() {
  local t0
  t0=$(now_us)
  "$work/crihookd" --config "$work/nri/crihookd.toml" --log-level warn 2>>"$work/nri/crihookd.log" &
  nri_pid=$!
  until curl -sf --unix-socket "$work/nri/metrics.sock" http://localhost/readyz >/dev/null 2>&1; do
    kill -0 "$nri_pid" 2>/dev/null || { cat "$work/nri/crihookd.log" >&2; exit 1; }
    (($(now_us) - t0 < 10000000)) || { echo "nri-mode: crihookd not registered after 10 s" >&2; exit 1; }
    sleep 0.01
  done
  echo "$1 nri start {\"us\": $(($(now_us) - t0))}" >>"$raw"
}
# SIGTERM, waited for. containerd drops a plugin that went away only when
# the next event it sends it fails ("closing plugin 10-crihook, failed to
# handle event 1: ttrpc: closed" in its log; NRI goes on without it): the
# next turn's warm-up pod takes that, and checks the hook is gone.
nri_stop() {
  local t0 rc=0
  t0=$(now_us)
  kill -TERM "$nri_pid"
  wait "$nri_pid" || rc=$?
  echo "$1 nri stop {\"us\": $(($(now_us) - t0)), \"rc\": $rc}" >>"$raw"
  nri_pid=""
}

# The null plugin, started and registered (it says so once containerd sent
# Synchronize) and stopped as NRI mode's crihookd is.
null_start() {
  local t0
  t0=$(now_us)
  : >"$work/null.out"
  "$work/nri_null_plugin" --socket "$work/ctd/nri.sock" >"$work/null.out" 2>>"$work/null.log" &
  null_pid=$!
  until grep -q registered "$work/null.out"; do
    kill -0 "$null_pid" 2>/dev/null || { cat "$work/null.log" >&2; exit 1; }
    (($(now_us) - t0 < 10000000)) || { echo "nri-mode: the null plugin not registered after 10 s" >&2; exit 1; }
    sleep 0.01
  done
}
null_stop() {
  local rc=0
  kill -TERM "$null_pid"
  wait "$null_pid" || rc=$?
  ((rc == 0)) || { echo "nri-mode: the null plugin exited $rc (round $1)" >&2; cat "$work/null.log" >&2; exit 1; }
  null_pid=""
}

# Four orders of the four in turn (a Williams square): over four rounds each
# comes at each place once and follows each of the others once.
orders=("direct proxy null nri" "proxy nri direct null" "nri null proxy direct"
  "null direct nri proxy")
echo "nri-mode: $rounds rounds of direct, proxy mode, NRI mode and the null plugin," \
  "$pods pods and $calls calls each" >&2
start=$(date +%s)
for ((round = 0; round < rounds; round++)); do
  for via in ${orders[$((round % 4))]}; do
    sock=$ctd cpu="containerd=$ctd_pid"
    case $via in
      proxy) sock=$work/proxy/crihook.sock cpu="$cpu,crihookd=$proxy_pid" ;;
      nri)
        nri_start "$round"
        cpu="$cpu,crihookd=$nri_pid"
        ;;
      null)
        null_start "$round"
        cpu="$cpu,plugin=$null_pid"
        ;;
    esac
    # Assigned first: a client that fails stops the run.
    out=$("$client" -endpoint "$sock" lifecycle -image "$image" -prefix "r$round-$via" \
      -pods "$pods" -env-probe CRIHOOK_BENCH -log-dir "$work/logs" -cpu "$cpu")
    echo "$round $via lifecycle $out" >>"$raw"
    out=$("$client" -endpoint "$sock" createremove -image "$image" -prefix "r$round-$via-cr" \
      -cycles "$cycles" -log-dir "$work/logs")
    echo "$round $via createremove $out" >>"$raw"
    # Last: a crihookd just started in NRI mode is still busy for a moment
    # after it registered (the reconcile pass, its first page faults), which
    # the direct path the unary call takes in NRI mode would otherwise pay.
    out=$("$client" -endpoint "$sock" unary -calls "$calls" -cpu "$cpu")
    echo "$round $via unary $out" >>"$raw"
    [[ $via != nri ]] || nri_stop "$round"
    [[ $via != null ]] || null_stop "$round"
  done
  echo "nri-mode: round $((round + 1)) of $rounds done ($(($(date +%s) - start)) s)" >&2
done

if [[ -n ${CRIHOOK_BENCH_NRI_SAVE:-} ]]; then
  mkdir -p "$CRIHOOK_BENCH_NRI_SAVE"
  cp "$raw" "$CRIHOOK_BENCH_NRI_SAVE/results.txt"
  cp "$work/proxy/crihookd.log" "$CRIHOOK_BENCH_NRI_SAVE/crihookd-proxy.log"
  cp "$work/nri/crihookd.log" "$CRIHOOK_BENCH_NRI_SAVE/crihookd-nri.log"
  cp "$work/ctd/containerd.log" "$CRIHOOK_BENCH_NRI_SAVE/containerd.log"
  # What the records hold after every pod was removed: nothing, if both
  # modes forget a pod with it.
  (cd "$work" && find proxy/state nri/state -type f) >"$CRIHOOK_BENCH_NRI_SAVE/state-files.txt"
fi
echo "### direct, proxy mode, NRI mode and the null plugin: $rounds alternated rounds; containerd" \
  "$("$containerd" --version | awk '{print $3}') with NRI, the static hook setting one env var"
python3 - "$raw" "$work/proxy/crihookd.log" "$work/nri/crihookd.log" <<'PY'
import json, random, statistics as st, sys

raw, proxy_log, nri_log = sys.argv[1:4]
unary, life, cr, cpu, ucpu, env, start, stop = {}, {}, {}, {}, {}, {}, [], []
for line in open(raw):
    rnd, via, kind, data = line.split(" ", 3)
    rnd, data = int(rnd), json.loads(data)
    if kind == "unary":
        unary.setdefault(rnd, {})[via] = data["p50_us"]
        if "crihookd" in data.get("cpu_us", {}):
            ucpu.setdefault(via, []).append(data["cpu_us"]["crihookd"] / data["calls"])
    elif kind == "lifecycle":
        life.setdefault(rnd, {})[via] = data["pods"]
        cpu[(rnd, via)] = {name: us / len(data["pods"]) for name, us in data["cpu_us"].items()}
        env.setdefault(via, set()).add(data["env"])
    elif kind == "createremove":
        cr.setdefault(rnd, {})[via] = data
    elif kind == "start":
        start.append(data["us"])
    elif kind == "stop":
        stop.append(data["us"])
        if data["rc"] != 0:
            print(f"  ! crihookd in NRI mode exited {data['rc']} on SIGTERM (round {rnd})")

# The hook ran where it should and nowhere else.
want = {"direct": {""}, "proxy": {"hooked"}, "nri": {"hooked"}, "null": {"hooked"}}
wrong_env = False
for via, seen in env.items():
    if seen != want[via]:
        wrong_env = True
        print(f"  ! {via}: the container's CRIHOOK_BENCH was {sorted(seen)}, expected {sorted(want[via])}")

rng = random.Random(1)
def paired(values):  # median and bootstrap 95% interval of a paired difference
    boot = sorted(st.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return st.median(values), boot[50], boot[1949]
def fmt(m, lo, hi, unit, scale=1.0, digits=1):
    return f"{m / scale:+.{digits}f} {unit} (95% {lo / scale:+.{digits}f} to {hi / scale:+.{digits}f})"

vias = ("direct", "proxy", "nri", "null")
added = ("proxy", "nri", "null")
rounds = sorted(r for r in life
                if len(life[r]) == 4 and len(unary.get(r, {})) == 4 and len(cr.get(r, {})) == 4)
n = len(rounds)

# Unary: each round's p50 per configuration.
print(f"unary call (ListPodSandbox, 1 connection), p50 µs, median of {n} rounds: " +
      ", ".join(f"{v} {st.median(unary[r][v] for r in rounds):.1f}" for v in vias))
u = {v: paired([unary[r][v] - unary[r]["direct"] for r in rounds]) for v in added}
u_np = paired([unary[r]["nri"] - unary[r]["proxy"] for r in rounds])
print("  added vs direct, paired by round: " +
      "; ".join(f"{v} {fmt(*u[v], 'µs')}" for v in added) +
      "; crihookd CPU per call: " +
      ", ".join(f"{v} {st.median(ucpu[v]):.1f} µs" for v in ("proxy", "nri") if v in ucpu))

# Lifecycle: a round's value is the median of its pods'.
def med(r, v, step="total"):
    return st.median(p[step] for p in life[r][v])
allpods = {v: [p for r in rounds for p in life[r][v]] for v in vias}
print(f"pod lifecycle (7 calls), ms, median of {len(allpods['direct'])} pods each: " +
      ", ".join(f"{v} {st.median(p['total'] for p in allpods[v]) / 1000:.1f}" for v in vias))
l = {v: paired([med(r, v) - med(r, "direct") for r in rounds]) for v in added}
l_np = paired([med(r, "nri") - med(r, "proxy") for r in rounds])
below = sum(med(r, "nri") < med(r, "proxy") for r in rounds)
print("  added vs direct, paired by round (medians of the round's pods): " +
      "; ".join(f"{v} {fmt(*l[v], 'ms', 1000, 2)}" for v in added))
print(f"  NRI - proxy, paired by round: {fmt(*l_np, 'ms', 1000, 2)}; NRI below proxy in {below} of {n} rounds")
# crihookd's part of NRI mode (NRI less the null plugin) against proxy
# mode's whole (proxy less direct): the runtime's NRI path set aside.
def own(r, get):
    return (get(r, "nri") - get(r, "null")) - (get(r, "proxy") - get(r, "direct"))
l_own = paired([own(r, med) for r in rounds])
print("  crihookd's part of NRI mode (NRI - null) less proxy mode's (proxy - direct), paired by round: "
      f"{fmt(*l_own, 'ms', 1000, 2)}")
steps = ["RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
         "RemoveContainer", "StopPodSandbox", "RemovePodSandbox"]
print("  per step, ms: median direct / proxy / NRI / null (paired added: proxy, NRI, null)")
for s in steps:
    m = [st.median(p[s] for p in allpods[v]) / 1000 for v in vias]
    add = [st.median(med(r, v, s) - med(r, "direct", s) for r in rounds) / 1000 for v in added]
    print(f"    {s:17} {m[0]:7.2f} / {m[1]:7.2f} / {m[2]:7.2f} / {m[3]:7.2f}"
          f"   ({add[0]:+.2f}, {add[1]:+.2f}, {add[2]:+.2f})")

# CreateContainer + RemoveContainer of a container never started.
print(f"CreateContainer + RemoveContainer (no runc), p50 ms, median of {n} rounds: " +
      ", ".join(f"{v} {st.median(cr[r][v]['p50_us'] for r in rounds) / 1000:.2f}"
                f" (create {st.median(cr[r][v]['create_p50_us'] for r in rounds) / 1000:.2f},"
                f" remove {st.median(cr[r][v]['remove_p50_us'] for r in rounds) / 1000:.2f})" for v in vias))
c = {v: paired([cr[r][v]["p50_us"] - cr[r]["direct"]["p50_us"] for r in rounds]) for v in added}
c_np = paired([cr[r]["nri"]["p50_us"] - cr[r]["proxy"]["p50_us"] for r in rounds])
c_own = paired([own(r, lambda r, v: cr[r][v]["p50_us"]) for r in rounds])
print("  added vs direct, paired by round: " +
      "; ".join(f"{v} {fmt(*c[v], 'ms', 1000, 2)}" for v in added) +
      f"; NRI - proxy {fmt(*c_np, 'ms', 1000, 2)}")
print(f"  crihookd's part of NRI mode less proxy mode's: {fmt(*c_own, 'ms', 1000, 2)}")

# CPU per pod lifecycle: what each process spent while the timed pods ran.
def cpu_ms(via, name):
    return st.median(cpu[(r, via)][name] for r in rounds) / 1000
print("CPU per pod lifecycle, ms (median of rounds): containerd " +
      ", ".join(f"{v} {cpu_ms(v, 'containerd'):.1f}" for v in vias) +
      f"; crihookd proxy mode {cpu_ms('proxy', 'crihookd'):.2f}, NRI mode {cpu_ms('nri', 'crihookd'):.2f}"
      f"; the null plugin {cpu_ms('null', 'plugin'):.2f}")
def cpu_added(r, v):  # containerd's and crihookd's (the plugin's), less containerd's direct
    return sum(cpu[(r, v)].values()) - cpu[(r, "direct")]["containerd"]
print("  containerd + crihookd added vs direct, paired by round: " +
      "; ".join(f"{v} {fmt(*paired([cpu_added(r, v) for r in rounds]), 'ms', 1000, 2)}"
                for v in added))
if start:
    print(f"crihookd in NRI mode, out of the timed region: exec to registered {st.median(start) / 1000:.0f} ms, "
          f"SIGTERM to exit {st.median(stop) / 1000:.0f} ms (medians of {len(start)})")

# The goal (issue 15): NRI adds nothing to unary calls, less than proxy mode
# to the lifecycle.
m, lo, hi = u["nri"]
direct_p50 = st.median(unary[r]["direct"] for r in rounds)
def verdict(m, lo, hi):
    if n < 5:
        return "too few rounds to tell"
    return "yes" if hi < 0 else ("no" if lo > 0 else "not resolved (the interval spans 0)")
# In NRI mode the unary call takes direct's path (crihookd is not in it):
# "nothing" is an interval that holds 0.
unary_goal = ("too few rounds to tell" if n < 5 else "met" if lo <= 0 <= hi else
              f"not met ({100 * m / direct_p50:+.1f}% of direct's p50)")
print(f"goal: NRI adds nothing to the unary call: {unary_goal} "
      f"({fmt(m, lo, hi, 'µs')}); NRI adds less than proxy mode: to the lifecycle "
      f"{verdict(*l_np)}, to Create+Remove {verdict(*c_np)}; crihookd's part of NRI mode "
      f"less than proxy mode's: to the lifecycle {verdict(*l_own)}, to Create+Remove {verdict(*c_own)}")

for mode, path in (("proxy", proxy_log), ("NRI", nri_log)):
    lines = [x.rstrip() for x in open(path, errors="replace") if x.strip()]
    if lines:
        print(f"  crihookd ({mode} mode) logged {len(lines)} lines at warn or above; the first: {lines[0][:300]}")
if wrong_env:
    sys.exit("nri-mode: the hook did not run where it should (above): the numbers do not compare")
PY
