#!/usr/bin/env bash
# The whole test suite: unit, integration (in-process fake runtime) and
# end-to-end (the real containerd and runc). Installs what it needs first.
# Extra arguments go to `meson test` (e.g. --suite unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
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
meson test -C build --num-processes 2 --print-errorlogs "$@" || rc=$?
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
  bash scripts/fuzz.sh "$fuzz" "${fuzz_harnesses[@]}" || fuzz_rc=$?
  ((fuzz_rc == 0)) || rc=1
fi
# --- end of fuzzing ---
# One closing line CI can read: test programs passed, failed and skipped.
# A program counts as skipped when not one of its tests passed (its main,
# test/support/gtest_main.cc, exits 77 then); the closing line names each
# with the first reasons it printed ("crihook-skip: ..."), and counts the
# single tests skipped inside programs that passed (from meson's JUnit XML).
python3 - build/meson-logs/testlog.json build/meson-logs/testlog.junit.xml <<'PY' || true
import json, sys
import xml.etree.ElementTree as et
passed = failed = 0
skipped = []  # "name: reason; reason"
skipped_names = set()
for line in open(sys.argv[1]):
    t = json.loads(line)
    r = t.get("result")
    if r == "OK":
        passed += 1
    elif r == "SKIP":
        why = [l.split("crihook-skip: ", 1)[1].strip()
               for l in (t.get("stdout") or "").splitlines() if l.startswith("crihook-skip: ")]
        name = t.get("name", "").rpartition(" / ")[2]  # "crihook:unit / config"
        skipped.append(f"{name}: {'; '.join(why) or 'no reason printed'}")
        skipped_names.add(name)
    else:
        failed += 1
inner = []  # single tests skipped in programs that were not skipped whole
try:
    # meson copies each program's gtest suites in, named "<project>:<suite> / <program>.<Suite>".
    for suite in et.parse(sys.argv[2]).getroot().iter("testsuite"):
        program = suite.get("name", "").rpartition(" / ")[2].rpartition(".")[0]
        if not program or program in skipped_names:
            continue
        for case in suite.iter("testcase"):
            if case.find("skipped") is not None:
                inner.append(f"{program}:{case.get('classname')}.{case.get('name')}")
except (OSError, et.ParseError):
    pass
line = f"crihook: {passed} passed, {failed} failed, {len(skipped)} skipped"
if skipped:
    line += " (" + " | ".join(skipped) + ")"
if inner:
    line += f"; {len(inner)} single tests skipped in passing programs ({', '.join(inner[:5])}"
    line += ", ...)" if len(inner) > 5 else ")"
print(line)
PY
[[ $fuzz == skip ]] || echo "crihook: fuzzing $( ((fuzz_rc == 0)) && echo passed || echo FAILED)"
exit $rc
