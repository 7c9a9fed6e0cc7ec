#!/usr/bin/env bash
# The whole test suite: unit, integration (in-process fake runtime),
# end-to-end (the real containerd and runc), the Debian package round trip
# and the fuzzing short pass. Installs what it needs first. Each phase prints
# its wall time; the run ends with the ten slowest test programs and, past
# CI's budget, the phases that grew.
#
#   scripts/test.sh            everything (what .ci/run runs)
#   scripts/test.sh ARGS...    one `meson test ARGS` (e.g. --suite unit) and
#                              the fuzzing pass (CRIHOOK_FUZZ_SECONDS=skip: none)
set -euo pipefail
cd "$(dirname "$0")/.."

# CI's budget for the whole run on its 2-core runner (its hard limit is 90
# minutes, past which nothing lands), and what each phase took in a clean
# clone's run on CI's runner with ccache filled (seconds, in the order the
# phases run; docs/testing.md "Where the time goes" shows them, the phase_table test
# checks it).
# A run past the budget names each phase past its figure by a quarter and
# half a minute.
budget=1800
declare -A figure=([deps]=1 [build]=365 [unit]=13 [integration]=32 [e2e]=162 [package]=299
  [fuzzing]=249 [thread_safety]=58)
phases=()
declare -A took
# phase NAME COMMAND...: runs COMMAND, prints and records its wall time;
# returns COMMAND's status.
phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "crihook: phase $name: starting"
  "$@" || rc=$?
  took[$name]=$((SECONDS - t0))
  phases+=("$name")
  echo "crihook: phase $name: ${took[$name]} s$( ((rc == 0)) || echo ", FAILED (exit $rc)")"
  return $rc
}

phase_times() {
  echo "crihook: phase times:$(for p in "${phases[@]}"; do printf ' %s %d s;' "$p" "${took[$p]}"; done) total $SECONDS s"
}
# Without dependencies or a build no test can run: the run ends there, saying so.
for step in deps build; do
  script=scripts/install-deps.sh
  [[ $step == build ]] && script=scripts/build.sh
  if ! phase $step bash $script; then
    phase_times
    echo "crihook: 0 passed, 1 failed, 0 skipped (the $step phase failed)"
    exit 1
  fi
done
# The end-to-end suite (test/e2e/) must run, not skip, wherever it can: on a
# machine with what it needs (the list test/support/e2e_env.h checks: root,
# containerd, runc, ctr, busybox), CRIHOOK_E2E_REQUIRED=1 makes a skip a
# failure. Elsewhere it is not required (unless the caller set it), and we
# say why.
e2e_missing=""
[[ $(id -u) -eq 0 ]] || e2e_missing+=" root"
for c in containerd runc ctr busybox; do
  command -v "$c" >/dev/null 2>&1 || e2e_missing+=" $c"
done
if [[ -z $e2e_missing ]]; then
  export CRIHOOK_E2E_REQUIRED=1
  echo "crihook: the e2e suite is required here (root, containerd, runc, ctr, busybox present)"
else
  echo "crihook: the e2e suite is not required here: this machine lacks$e2e_missing"
fi

rc=0
logs=()
# suite NAME MESON-TEST-ARGS...: one `meson test` as phase NAME, its logs
# build/meson-logs/NAME.{json,junit.xml,txt}.
suite() {
  local name=$1
  shift
  logs+=("$name")
  # A phase that runs nothing writes no log: an older run's must not count.
  rm -f build/meson-logs/"$name".{json,junit.xml,txt}
  phase "$name" meson test -C build --no-rebuild --num-processes 2 --print-errorlogs \
    --logbase "$name" "$@" || rc=1
}
if (($#)); then
  suite tests "$@"
else
  suite unit --suite unit
  suite integration --suite integration
  suite e2e --suite e2e --no-suite package
  suite package --suite package
fi

# --- fuzzing: CI's short pass (scripts/fuzz.sh, fuzz/) ---
# Replays each listed harness's committed corpus, then fuzzes each for
# CRIHOOK_FUZZ_SECONDS (default 10 s; 0: replay only; "skip": none), in its
# own clang build (build-fuzz). A crash fails the run like a failed test.
# Every harness; CRIHOOK_FUZZ_HARNESSES names fewer (fuzz_cdi_spec and
# fuzz_hookserver_file link all of hooks/, the longest part of the clang build).
fuzz=${CRIHOOK_FUZZ_SECONDS:-10}
# Unset: scripts/fuzz.sh's own list, so that a new harness runs here too.
read -ra fuzz_harnesses <<<"${CRIHOOK_FUZZ_HARNESSES:-}"
fuzz_rc=0
if [[ $fuzz != skip ]]; then
  phase fuzzing bash scripts/fuzz.sh "$fuzz" "${fuzz_harnesses[@]}" || fuzz_rc=$?
  ((fuzz_rc == 0)) || rc=1
fi
# --- end of fuzzing ---

# The threading model checked by the compiler: the daemon's code built with
# clang's -Wthread-safety as errors, and the analysis shown to still refuse
# planted mistakes (scripts/thread-safety.sh, its own build-tsa).
phase thread_safety bash scripts/thread-safety.sh || rc=1

# Where the time went: each phase, then the ten slowest test programs.
phase_times
# The ten slowest programs and the closing line CI reads
# (scripts/test-summary.py); with every phase run, a test none of them ran
# counts as failed.
all=()
if ((!$#)); then
  meson test -C build --no-rebuild --list >build/meson-logs/all-tests.txt 2>/dev/null
  all=(--all build/meson-logs/all-tests.txt)
fi
python3 scripts/test-summary.py "${all[@]}" "${logs[@]/#/build/meson-logs/}" || rc=1
[[ $fuzz == skip ]] || echo "crihook: fuzzing $( ((fuzz_rc == 0)) && echo passed || echo FAILED)"
# Past the budget: a warning, not a failure (the machine is shared and noisy).
if ((SECONDS > budget)); then
  grew=""
  for p in "${phases[@]}"; do
    f=${figure[$p]:-0}
    ((took[$p] * 4 > f * 5 && took[$p] > f + 30)) && grew+=" $p ${took[$p]} s (figure $f s);"
  done
  if [[ -n $grew ]]; then grew="phases past their figure:${grew%;}"; else grew="no phase past its figure by much"; fi
  echo "crihook: WARNING: this run took $SECONDS s, past CI's budget of $budget s; $grew"
fi
exit $rc
