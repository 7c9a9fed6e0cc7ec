#!/usr/bin/env python3
"""Checks that the phase table of docs/testing.md ("Where the time goes") lists
the phases of scripts/test.sh's `figure` array, in its order (the order the
phases run), with the figures test.sh compares a run's times against: the
one place a figure is set is test.sh."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
script = (root / "scripts" / "test.sh").read_text()
m = re.search(r"declare -A figure=\((.*?)\)", script, re.S)
if not m:
    sys.exit("scripts/test.sh: no `declare -A figure=(...)`")
pairs = re.findall(r"\[(\w+)\]=(\d+)", m.group(1))
figures = dict(pairs)
order = [n for n, _ in pairs]  # written in the order the phases run

page = (root / "docs" / "testing.md").read_text()
section = re.search(r"^## Where the time goes\n(.*?)(?=^#)", page, re.M | re.S)
if not section:
    sys.exit('docs/testing.md: no "## Where the time goes" section')
rows = re.findall(r"^\| `(\w+)` \|.*\| (\d+) s \|\s*$", section.group(1), re.M)

problems = []
if [n for n, _ in rows] != order:
    problems.append(f"docs/testing.md's phases {[n for n, _ in rows]} are not test.sh's {order}")
for name, secs in rows:
    if figures.get(name) != secs:
        problems.append(f"phase {name}: docs/testing.md says {secs} s, test.sh's figure is {figures.get(name)} s")
for p in problems:
    print(f"check-phase-table: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
