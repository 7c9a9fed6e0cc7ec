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
exit $rc
