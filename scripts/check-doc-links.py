#!/usr/bin/env python3
"""Checks every relative link of README.md and docs/*.md (or the files given):
the file it names exists, and the anchor after `#`, if any, is a heading of
that file as GitHub makes anchors of headings. Links in code blocks and inline
code are not links; http(s) and mailto links are not checked (no network).
Also every test the pages name in backticks as `Suite.TestName` (README's
failure-modes table names the test behind each row) is a TEST, TEST_F or
TEST_P of test/.

Prints one line per broken link or missing test, `FILE:LINE: ...: why`, and
exits 1 if there is any."""
import pathlib
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the tree (the package test copies it)
from markdown_text import blank_fences  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
TEST_NAME = re.compile(r"`([A-Z][A-Za-z0-9]*)\.([A-Z][A-Za-z0-9]*)`")
TEST_DEF = re.compile(r"\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) with fenced code blocks and inline code blanked."""
    for n, line in enumerate(blank_fences(text).split("\n"), 1):
        yield n, re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor of a heading: lower case, markup and punctuation gone
    (letters, digits, `-`, `_` and spaces kept), spaces made `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(path):
    seen = {}
    out = set()
    for line in blank_fences(path.read_text(encoding="utf-8")).split("\n"):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_names():
    """Suite.Name of every test in test/."""
    names = set()
    for f in (ROOT / "test").rglob("*.cc"):
        names.update(f"{a}.{b}" for a, b in TEST_DEF.findall(f.read_text(encoding="utf-8")))
    return names


def missing_tests(path, tests):
    problems = []
    for n, line in enumerate(blank_fences(path.read_text(encoding="utf-8")).split("\n"), 1):
        for suite, name in TEST_NAME.findall(line):
            if f"{suite}.{name}" not in tests:
                problems.append(f"{path.relative_to(ROOT)}:{n}: `{suite}.{name}`: no such test in test/")
    return problems


def check(path, cache):
    problems = []
    for n, line in prose_lines(path.read_text(encoding="utf-8")):
        for m in LINK.finditer(line):
            text, target = m.group(1), m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{n}: [{text}]({target})"
            if not dest.exists():
                problems.append(f"{where}: {file_part} does not exist")
                continue
            if anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading of {dest.relative_to(ROOT)} has the anchor #{anchor}")
    return problems


def main(argv):
    files = [pathlib.Path(a).resolve() for a in argv] or \
        [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    cache = {}
    tests = test_names()
    problems = [p for f in files for p in check(f, cache) + missing_tests(f, tests)]
    for p in problems:
        print(p)
    if problems:
        print(f"check-doc-links: {len(problems)} broken link(s) or missing test(s) in {len(files)} file(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
