#!/usr/bin/env python3
"""The end of scripts/test.sh: the ten slowest test programs, then the one
closing line CI reads (test programs passed, failed and skipped).

  test-summary.py [--all LIST] LOGBASE...

LOGBASE: each phase's meson log, without its .json / .junit.xml suffix.
--all LIST: a file with `meson test --list`'s lines: every test the build
defines. A test that is in none of the logs (a suite no phase runs, a phase
that ran nothing) counts as failed, named, so a test cannot drop out of CI
unseen.

A program counts as skipped when not one of its tests passed (its main,
test/support/gtest_main.cc, exits 77 then); the closing line names each with
the first reasons it printed ("crihook-skip: ..."), and counts the single
tests skipped inside programs that passed (from meson's JUnit XML)."""
import json
import sys
import xml.etree.ElementTree as et


def main(argv):
    expected = None
    if argv[:1] == ["--all"]:
        with open(argv[1]) as f:
            # "crihook:unit / config": the name after the suites.
            expected = {l.strip().rpartition(" / ")[2] for l in f if " / " in l}
        argv = argv[2:]
    passed = failed = 0
    failures = []
    skipped = []  # "name: reason; reason"
    skipped_names = set()
    seen = set()
    durations = []  # (seconds, name)
    for base in argv:
        try:
            lines = open(base + ".json").readlines()
        except OSError:
            continue
        for line in lines:
            t = json.loads(line)
            r = t.get("result")
            name = t.get("name", "").rpartition(" / ")[2]  # "crihook:unit / config"
            seen.add(name)
            durations.append((t.get("duration") or 0.0, name))
            if r == "OK":
                passed += 1
            elif r == "SKIP":
                why = [l.split("crihook-skip: ", 1)[1].strip()
                       for l in (t.get("stdout") or "").splitlines()
                       if l.startswith("crihook-skip: ")]
                skipped.append(f"{name}: {'; '.join(why) or 'no reason printed'}")
                skipped_names.add(name)
            else:
                failed += 1
    if expected is not None:
        for name in sorted(expected - seen):
            failed += 1
            failures.append(f"{name} ran in no phase")
    inner = []  # single tests skipped in programs that were not skipped whole
    for base in argv:
        try:
            root = et.parse(base + ".junit.xml").getroot()
        except (OSError, et.ParseError):
            continue
        # meson copies each program's gtest suites in, named
        # "<project>:<suite> / <program>.<Suite>".
        for suite in root.iter("testsuite"):
            program = suite.get("name", "").rpartition(" / ")[2].rpartition(".")[0]
            if not program or program in skipped_names:
                continue
            for case in suite.iter("testcase"):
                if case.find("skipped") is not None:
                    inner.append(f"{program}:{case.get('classname')}.{case.get('name')}")
    slowest = sorted(durations, reverse=True)[:10]
    print("crihook: the ten slowest test programs: "
          + ", ".join(f"{name} {secs:.0f} s" for secs, name in slowest))
    for f in failures:
        print(f"crihook: {f}")
    line = f"crihook: {passed} passed, {failed} failed, {len(skipped)} skipped"
    if skipped:
        line += " (" + " | ".join(skipped) + ")"
    if inner:
        line += f"; {len(inner)} single tests skipped in passing programs ({', '.join(inner[:5])}"
        line += ", ...)" if len(inner) > 5 else ")"
    print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
