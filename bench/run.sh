#!/usr/bin/env bash
# Runs crihook_bench against the in-process fake runtime and a private
# containerd, with crihookd (its relay, the transparent one) and, as the
# baseline a proxy must be measured against, a raw byte relay (socat) in the
# same place; then the grpc-go client (gocri bench, kubelet's client
# library) against containerd direct, through crihookd and through socat,
# in alternating rounds, and one connection's added p50 over many
# alternated rounds, paired with socat's.
# With CRIHOOK_BENCH_BASELINE=<another build's crihookd>, that crihookd runs
# beside this one: crihook_bench through it too, and in every alternated
# gocri round as "baseline", with this crihookd's ratio to it (a change is
# judged by medians of runs side by side, never by figures of another day).
# Usage: [CRIHOOK_BENCH_BASELINE=path] bash bench/run.sh [crihook_bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
for tool in socat strace; do
  command -v $tool >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $tool >/dev/null
done
[[ $(id -u) -eq 0 ]] || { echo "bench: containerd needs root" >&2; exit 1; }

work=$(mktemp -d /tmp/crihook-benchrun-XXXXXX)
image=docker.io/library/busybox:crihook
ctd_pid=""
cleanup() {
  [[ -z "$ctd_pid" ]] || kill "$ctd_pid" 2>/dev/null || true
  pkill -f "socat UNIX-LISTEN:$work" 2>/dev/null || true
  pkill -f "crihookd --listen $work/" 2>/dev/null || true
  pkill -f "crihookd --config $work/" 2>/dev/null || true
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

echo "### through crihookd (the transparent relay)"
build/bench/crihook_bench --crihookd build/tools/crihookd --containerd "$work/ctd/containerd.sock" "$@"
baseline=${CRIHOOK_BENCH_BASELINE:-}
if [[ -n $baseline ]]; then
  echo
  echo "### through the baseline crihookd ($baseline)"
  build/bench/crihook_bench --crihookd "$baseline" --containerd "$work/ctd/containerd.sock" "$@"
fi
echo
echo "### through a raw byte relay (socat), for comparison"
build/bench/crihook_bench --crihookd "$work/raw-relay.sh" --containerd "$work/ctd/containerd.sock" "$@" \
  | grep -v -e 'resident memory' -e 'CPU time' -e 'system calls'

# The grpc-go client: Version against containerd, direct, through crihookd
# (no config file, a state directory of its own) and through socat, three
# alternating rounds; one line each, medians over the rounds.
gocri=build/test/e2e/gocri/gocri
ctd="$work/ctd/containerd.sock"
build/tools/crihookd --listen "$work/go-crihook.sock" --backend "unix://$ctd" \
  --state-dir "$work/go-state" --log-level warn &
go_crihookd=$!
socat "UNIX-LISTEN:$work/go-socat.sock,fork" "UNIX-CONNECT:$ctd" &
go_socat=$!
go_vias=(direct crihookd socat)
go_baseline=""
if [[ -n $baseline ]]; then
  # In a folder of its own: the metrics socket goes beside the CRI socket.
  mkdir -p "$work/base"
  "$baseline" --listen "$work/base/go-base.sock" --backend "unix://$ctd" \
    --state-dir "$work/go-base-state" --log-level warn &
  go_baseline=$!
  go_vias+=(baseline)
fi
for s in go-crihook go-socat ${go_baseline:+base/go-base}; do
  for _ in $(seq 100); do [[ -S $work/$s.sock ]] && break; sleep 0.05; done
done
# via_socket VIA: the socket a gocri round dials.
via_socket() {
  case $1 in
    direct) echo "$ctd" ;;
    crihookd) echo "$work/go-crihook.sock" ;;
    socat) echo "$work/go-socat.sock" ;;
    baseline) echo "$work/base/go-base.sock" ;;
  esac
}
echo
echo "### grpc-go client (gocri bench), Version against containerd: p50 µs (1 client), calls/s (4 connections; 16 streams on 1 connection)"
for shape in "-conns 1 -streams 1" "-conns 4 -streams 1" "-conns 1 -streams 16"; do
  for round in 1 2 3; do
    for via in "${go_vias[@]}"; do
      # shellcheck disable=SC2086
      echo "$shape $via $("$gocri" -endpoint "$(via_socket $via)" bench -calls 4000 $shape)"
    done
  done
done | python3 -c '
import json, statistics, sys
rows = {}
for line in sys.stdin:
    parts = line.split()
    shape = " ".join(parts[:4]); via = parts[4]; r = json.loads(" ".join(parts[5:]))
    rows.setdefault(shape, {}).setdefault(via, []).append(r)
for shape, vias in rows.items():
    med = {v: (statistics.median(x["p50_us"] for x in rs), statistics.median(x["calls_per_s"] for x in rs)) for v, rs in vias.items()}
    d = med["direct"]
    out = [shape]
    for v in [v for v in ("direct", "crihookd", "baseline", "socat") if v in med]:
        p50, thr = med[v]
        out.append(f"{v}: p50 {p50:.1f} thr {thr:.0f}" + ("" if v == "direct" else f" ({p50/d[0]:.2f}x, thr {thr/d[1]:.2f}x)"))
    if "baseline" in med:
        b = med["baseline"]; c = med["crihookd"]
        out.append(f"crihookd/baseline: p50 {c[0]/b[0]:.2f}x, thr {c[1]/b[1]:.2f}x")
    print("  " + "; ".join(out))
'

# One connection's added latency, which a few rounds cannot tell apart from
# the machine's noise (a shared 2-core VM moves a p50 by 20 µs from one run
# to the next): CRIHOOK_BENCH_P50_ROUNDS rounds (20) of 2,000 calls, the
# order rotated each round; per relay the median over rounds of its p50 less
# direct's in the same round, and crihookd's p50 less socat's paired by
# round, with a bootstrap 95% interval of that median.
rounds=${CRIHOOK_BENCH_P50_ROUNDS:-20}
n=${#go_vias[@]}
for ((round = 0; round < rounds; round++)); do
  for ((k = 0; k < n; k++)); do
    via=${go_vias[$(((k + round) % n))]}
    echo "$round $via $("$gocri" -endpoint "$(via_socket $via)" bench -calls 2000 -conns 1 -streams 1)"
  done
done | python3 -c '
import json, random, statistics, sys
p50 = {}
for line in sys.stdin:
    parts = line.split(maxsplit=2)
    p50.setdefault(int(parts[0]), {})[parts[1]] = json.loads(parts[2])["p50_us"]
rounds = list(p50.values())
added = {v: statistics.median(r[v] - r["direct"] for r in rounds) for v in ("crihookd", "baseline", "socat") if v in rounds[0]}
paired = [r["crihookd"] - r["socat"] for r in rounds]
rng = random.Random(1)
boot = sorted(statistics.median(rng.choices(paired, k=len(paired))) for _ in range(2000))
print(f"  added p50, 1 connection, {len(rounds)} alternated rounds (median of p50 - direct): " +
      ", ".join(f"{v} {added[v]:+.1f} us" for v in added) +
      f"; crihookd - socat paired by round: median {statistics.median(paired):+.1f} us" +
      f" (95% interval {boot[50]:+.1f} to {boot[1949]:+.1f}), below socat in" +
      f" {sum(d < 0 for d in paired)} of {len(paired)} rounds")
if "baseline" in rounds[0]:
    vs = [r["crihookd"] - r["baseline"] for r in rounds]
    boot = sorted(statistics.median(rng.choices(vs, k=len(vs))) for _ in range(2000))
    print(f"  crihookd - baseline paired by round: median {statistics.median(vs):+.1f} us"
          f" (95% interval {boot[50]:+.1f} to {boot[1949]:+.1f})")
'

# System calls crihookd makes per call it relays for the grpc-go client
# (strace -c on crihookd over one bench run; its calls plus the 20 warm-up
# calls gocri makes on each connection).
go_syscalls() {  # PID SOCKET CONNS STREAMS CALLS [GAP between one caller's calls]
  local pid=$1 sock=$2
  shift 2
  strace -f -c -o "$work/go-strace.txt" -p "$pid" 2>/dev/null &
  local tracer=$!
  sleep 0.5
  "$gocri" -endpoint "$sock" bench -calls "$3" -conns "$1" -streams "$2" \
    -gap "${4:-0}" >/dev/null
  kill -INT "$tracer"
  wait "$tracer" || true
  awk -v n=$(($3 + 20 * $1)) '$NF == "total" { printf "%.2f", $4 / n }' "$work/go-strace.txt"
}
syscall_line() {  # NAME PID SOCKET
  echo "  system calls per relayed call ($1, strace -c): 1 client $(go_syscalls "$2" "$3" 1 1 2000);" \
    "1 client, 5 ms apart $(go_syscalls "$2" "$3" 1 1 300 5ms);" \
    "16 streams on one connection $(go_syscalls "$2" "$3" 1 16 4000)"
}
syscall_line crihookd $go_crihookd "$work/go-crihook.sock"
[[ -z $go_baseline ]] || syscall_line baseline $go_baseline "$work/base/go-base.sock"
kill $go_crihookd $go_socat $go_baseline 2>/dev/null || true
