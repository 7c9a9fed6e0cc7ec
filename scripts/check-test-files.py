#!/usr/bin/env python3
"""Checks that the tests of every source file of the daemon can be found.

STYLE.md: tests mirror the source tree. For each `.cc` under the daemon's
folders, either `test/<folder>/<name>_test.cc` exists, or
docs/architecture.md's table "Where the tests of each file are" has a row
`| \\`<folder>/<name>.cc\\` | ... |` saying where they are (every test file
it names must exist). A row for a file that has a test file of its name, or
for a file that does not exist, is an error too (the table stays true).

Exits 1 naming every file whose tests cannot be found.
"""
import os
import re
import subprocess
import sys

FOLDERS = ('base', 'cri', 'config', 'confine', 'hooks', 'metrics', 'nri', 'proxy', 'topology',
           'tools')
HEADING = '### Where the tests of each file are'
ROW = re.compile(r'^\| `([^`]+\.cc)` \| (.*) \|\s*$')
TEST_FILE = re.compile(r'`(test/[^`]+\.(?:cc|h|sh|go))`')


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [f for f in subprocess.check_output(
        ['git', '-C', root, 'ls-files', '--cached', '--others', '--exclude-standard', '*.cc'],
        text=True).split() if f.split('/', 1)[0] in FOLDERS]
    with open(os.path.join(root, 'docs', 'architecture.md'), encoding='utf-8') as fh:
        doc = fh.read()
    if HEADING not in doc:
        print(f'docs/architecture.md: no section "{HEADING}"')
        return 1
    section = doc.split(HEADING, 1)[1].split('\n#', 1)[0]
    rows = {}
    errors = []
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = m.group(2)
    for f in files:
        mirror = os.path.join('test', os.path.dirname(f), os.path.basename(f)[:-3] + '_test.cc')
        has_mirror = os.path.exists(os.path.join(root, mirror))
        if f in rows:
            if has_mirror:
                errors.append(f'{f}: has {mirror}; its row in "{HEADING}" is not needed')
            named = TEST_FILE.findall(rows[f])
            if not named:
                errors.append(f'{f}: its row in "{HEADING}" names no test file')
            for t in named:
                if not os.path.exists(os.path.join(root, t)):
                    errors.append(f'{f}: its row names {t}, which does not exist')
        elif not has_mirror:
            errors.append(f'{f}: no {mirror}, and no row in docs/architecture.md "{HEADING}" '
                          'saying where its tests are')
    for f in rows:
        if f not in files:
            errors.append(f'docs/architecture.md "{HEADING}": {f} does not exist')
    for e in errors:
        print(e)
    if errors:
        return 1
    print(f'check-test-files: the tests of {len(files)} source files found '
          f'({len(files) - len(rows)} by their name, {len(rows)} in the table)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
