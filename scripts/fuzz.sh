#!/usr/bin/env bash
# Builds crihook's libFuzzer harnesses (fuzz/) into ./build-fuzz with clang-14,
# ASan and UBSan, replays each harness's committed corpus (fuzz/corpus/<harness>/),
# then fuzzes each for SECONDS on a copy of it (the committed corpus never grows).
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]
#     SECONDS   per harness, default 60; 0 replays the committed corpus only
#     HARNESS   e.g. fuzz_relay; default every harness
#
# Exits non-zero when a harness crashes, leaks, hangs (-timeout) or runs out of
# memory (-rss_limit_mb), printing the reproducer's path; rerun one with
#   build-fuzz/fuzz/<harness> <reproducer>
# Environment: FUZZ_JOBS (ninja -j, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
all=(fuzz_grpc_wire fuzz_annotations fuzz_cdi_spec fuzz_hookserver_file fuzz_config
     fuzz_topology fuzz_relay fuzz_grpc_channel fuzz_h2_wire fuzz_transparent fuzz_nri_wire)
harnesses=("$@")
((${#harnesses[@]})) || harnesses=("${all[@]}")
for h in "${harnesses[@]}"; do
  [[ " ${all[*]} " == *" $h "* ]] || { echo "fuzz: no harness $h (have: ${all[*]})" >&2; exit 2; }
done

bash scripts/install-deps.sh
. scripts/ccache.sh
ccache_mark
t0=$SECONDS
build=build-fuzz
if [[ ! -f $build/build.ninja ]]; then
  # Only the harnesses and what they link are built (see fuzz/meson.build);
  # -Dtests=false keeps the test suite out of this directory.
  # Through ccache (scripts/ccache.sh): a second cold setup is cache hits,
  # from a clone in another folder too (the tree's path mapped out of the
  # debug info, which ccache would otherwise hash with the -g objects).
  ccache=$(command -v ccache || true)
  CC="${ccache:+$ccache }clang-14" CXX="${ccache:+$ccache }clang++-14" \
    meson setup "$build" -Dfuzz=true -Dtests=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dcpp_args="-ffile-prefix-map=$PWD=."
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz/$h"); done
ninja -C "$build" -j"${FUZZ_JOBS:-2}" "${targets[@]}"
echo "fuzz: built ${#targets[@]} harnesses in $((SECONDS - t0)) s ($(ccache_hits))"
t0=$SECONDS

# Bounds on one input: its size (a CDI spec or config of 16 KiB is already
# large; HTTP/2 frames of several calls fit too), its time (an exec takes
# milliseconds; 10 s is a hang) and the process's memory.
max_len() {
  case $1 in
    fuzz_grpc_wire | fuzz_topology) echo 4096 ;;
    *) echo 16384 ;;
  esac
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for h in "${harnesses[@]}"; do
  bin=$build/fuzz/$h
  art=$build/fuzz-artifacts/$h
  work=$build/fuzz-work/$h
  rm -rf "$work"
  mkdir -p "$art" "$work/corpus" "$work/tmp"
  mapfile -t seeds < <(find "fuzz/corpus/$h" -type f | sort)
  opts=(-max_len="$(max_len "$h")" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$art/")
  rc=0
  # Replay: every committed input once, as it is (inputs that once crashed
  # stay fixed).
  echo "fuzz: $h: replaying ${#seeds[@]} committed inputs"
  TMPDIR=$work/tmp "$bin" "${opts[@]}" "${seeds[@]}" >"$work/replay.log" 2>&1 || rc=$?
  if ((rc == 0 && seconds > 0)); then
    cp "${seeds[@]}" "$work/corpus/"
    echo "fuzz: $h: fuzzing for ${seconds}s"
    TMPDIR=$work/tmp "$bin" "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 \
      "$work/corpus" >"$work/fuzz.log" 2>&1 || rc=$?
    grep -E '^#[0-9]+[[:space:]]+DONE' "$work/fuzz.log" | tail -1 | sed "s/^/fuzz: $h: /" || true
    grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' "$work/fuzz.log" |
      sed "s/^/fuzz: $h: /" || true
  fi
  rm -rf "$work/tmp"
  if ((rc != 0)); then
    failed+=("$h")
    log=$work/replay.log
    [[ -f $work/fuzz.log ]] && log=$work/fuzz.log
    echo "fuzz: $h FAILED (exit $rc); log $log" >&2
    grep -E 'ERROR: |SUMMARY: |^fuzz_[a-z_]+: ' "$log" | head -5 >&2 || true
    # Fuzzing writes the input to $art; a replayed input is its own reproducer.
    grep -E 'Test unit written to' "$log" | sed 's/^.*Test unit written to /fuzz: reproducer: /' >&2 || true
    if [[ $log == "$work/replay.log" ]]; then
      grep -E '^Running: ' "$log" | tail -1 | sed 's/^Running: /fuzz: reproducer: /' >&2 || true
    fi
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${harnesses[*]}: no crash ($((SECONDS - t0)) s of replay and fuzzing)"
