#!/usr/bin/env bash
# The whole test suite: unit, integration (in-process fake runtime) and
# end-to-end (the real containerd and runc). Installs what it needs first.
# Extra arguments go to `meson test` (e.g. --suite unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# As root the end-to-end suite must run, not skip.
if [[ $(id -u) -eq 0 ]]; then export CRIHOOK_E2E_REQUIRED=1; fi
rc=0
meson test -C build --num-processes 2 --print-errorlogs "$@" || rc=$?
# --- fuzzing: CI's short pass (scripts/fuzz.sh, fuzz/) ---
# Replays each listed harness's committed corpus, then fuzzes each for
# CRIHOOK_FUZZ_SECONDS (default 10 s; 0: replay only; "skip": none), in its
# own clang build (build-fuzz). A crash fails the run like a failed test.
# Every harness; CRIHOOK_FUZZ_HARNESSES names fewer (fuzz_cdi_spec and
# fuzz_hookserver_file link all of hooks/, the longest part of the clang build).
fuzz=${CRIHOOK_FUZZ_SECONDS:-10}
read -ra fuzz_harnesses <<<"${CRIHOOK_FUZZ_HARNESSES:-fuzz_grpc_wire fuzz_relay fuzz_annotations fuzz_config fuzz_topology fuzz_cdi_spec fuzz_hookserver_file}"
fuzz_rc=0
if [[ $fuzz != skip ]]; then
  bash scripts/fuzz.sh "$fuzz" "${fuzz_harnesses[@]}" || fuzz_rc=$?
  ((fuzz_rc == 0)) || rc=1
fi
# --- end of fuzzing ---
# One closing line CI can read: test programs passed and failed.
python3 - build/meson-logs/testlog.json <<'PY' || true
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r == "OK": passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"crihook: {passed} passed, {failed} failed, {skipped} skipped")
PY
[[ $fuzz == skip ]] || echo "crihook: fuzzing $( ((fuzz_rc == 0)) && echo passed || echo FAILED)"
exit $rc
