#!/usr/bin/env python3
"""Checks that no function of crihook's own code is longer than 80 lines.

STYLE.md: "Functions fit on a screen (<= 80 lines, data tables aside)".
A function is a brace block at namespace or class scope that follows a
parameter list: its length counts the lines from its signature's last line
to its closing brace, lambdas and local classes inside it included. Tests
(test/), benchmarks (bench/), fuzzers (fuzz/) and generated code are not
checked. A data table (an initializer of rows, not code) is marked by the
line `// function-length: table` right above its signature.

  check-function-length.py [--max N] [--list] [files...]

Exits 1 naming every function over the limit; --list prints every function
over 40 lines, longest first.
"""
import argparse
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the tree (the package test copies it)
from  cxx_source import strip

CHECKED = ('base', 'cri', 'config', 'confine', 'hooks', 'metrics', 'nri', 'proxy', 'systemd',
           'topology', 'tools')
TABLE_MARK = '// function-length: table'


# What may stand between a parameter list's ')' and a function body's '{'.
TAIL = re.compile(r'\)\s*(const|override|final|noexcept(\([^()]*\))?|mutable|&|&&|\s|'
                  r'->\s*[\w:<>,\s*&]+|ABSL_[A-Z_]+\([^()]*\)|ABSL_[A-Z_]+)*$')
INIT_LIST = re.compile(r'\)\s*(noexcept\s*)?:\s*[\w:]+\s*[({]', re.S)
NOT_FUNCTION = re.compile(r'\b(if|for|while|switch|catch|return|sizeof|decltype|alignof|'
                          r'static_assert|requires)\s*\($')


def functions(path, text):
    """(name, first line, last line, is_table) of every function body in `text`."""
    s = strip(text)
    lines = text.split('\n')
    result = []
    # Scope stack: 'ns' (namespace/class/extern/enum: look for functions
    # inside) or 'skip' (a body or an initializer: skip to its end).
    i, n = 0, len(s)
    depth_kinds = []
    while i < n:
        c = s[i]
        if c == '{':
            kind = 'skip'
            head = s[max(0, i - 600):i]
            # The statement the brace opens: text since the last ; { } at this level.
            cut = max(head.rfind(';'), head.rfind('{'), head.rfind('}'))
            stmt = head[cut + 1:].strip()
            if all(k == 'ns' for k in depth_kinds):
                if re.search(r'\b(namespace|class|struct|union|enum)\b[^()=]*$', stmt) or \
                        re.search(r'extern\s+"C"\s*$', stmt):
                    kind = 'ns'
                else:
                    fn = function_head(stmt)
                    if fn:
                        end = matching(s, i)
                        first = s.count('\n', 0, i) + 1
                        last = s.count('\n', 0, end) + 1
                        sig_line = first
                        table = any(TABLE_MARK in lines[k] for k in
                                    range(max(0, sig_line - 1 - 12), sig_line - 1)
                                    if k < len(lines)) and _marked(lines, sig_line, stmt)
                        result.append((fn, first, last, table))
                        i = end + 1
                        continue
            depth_kinds.append(kind)
            if kind == 'skip':
                end = matching(s, i)
                depth_kinds.pop()
                i = end + 1
                continue
        elif c == '}':
            if depth_kinds:
                depth_kinds.pop()
        i += 1
    return result


def _marked(lines, sig_line, stmt):
    """Whether the mark is right above the statement's first line."""
    first = sig_line - stmt.count('\n')
    for k in range(first - 2, max(-1, first - 4), -1):
        if 0 <= k < len(lines):
            if TABLE_MARK in lines[k]:
                return True
            if lines[k].strip() and not lines[k].strip().startswith('//'):
                return False
    return False


def function_head(stmt):
    """The function's name when `stmt` ends in a function signature, else None."""
    if '(' not in stmt or '=' in stmt.split('(', 1)[0]:
        return None
    m = INIT_LIST.search(stmt)
    sig = stmt[:m.start() + 1] if m else stmt
    if not m:
        t = TAIL.search(sig)
        if not t:
            return None
        sig = sig[:t.start() + 1]
    # The ')' that closes the parameter list, and its '('.
    depth = 0
    for k in range(len(sig) - 1, -1, -1):
        if sig[k] == ')':
            depth += 1
        elif sig[k] == '(':
            depth -= 1
            if depth == 0:
                before = sig[:k].rstrip()
                if NOT_FUNCTION.search(before + '('):
                    return None
                name = re.search(r'([~\w:]+(?:operator\s*[^\s(]+)?)\s*$', before)
                if not name or name.group(1) in ('if', 'for', 'while', 'switch'):
                    return None
                return name.group(1)
    return None


def matching(s, i):
    depth = 0
    for k in range(i, len(s)):
        if s[k] == '{':
            depth += 1
        elif s[k] == '}':
            depth -= 1
            if depth == 0:
                return k
    return len(s) - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--max', type=int, default=80)
    ap.add_argument('--list', action='store_true')
    ap.add_argument('files', nargs='*')
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = args.files or [
        f for f in subprocess.check_output(['git', '-C', root, 'ls-files', '--cached', '--others',
                                            '--exclude-standard', '*.h', '*.cc'],
                                           text=True).split()
        if f.split('/', 1)[0] in CHECKED]
    found = []
    for f in files:
        with open(os.path.join(root, f), encoding='utf-8') as fh:
            text = fh.read()
        for name, first, last, table in functions(f, text):
            found.append((last - first + 1, f, first, name, table))
    found.sort(reverse=True)
    if args.list:
        for length, f, first, name, table in found:
            if length > 40:
                print(f'{length:4d} {f}:{first} {name}{" (table)" if table else ""}')
        return 0
    over = [x for x in found if x[0] > args.max and not x[4]]
    for length, f, first, name, _ in over:
        print(f'{f}:{first}: {name} is {length} lines, over {args.max} '
              f'(STYLE.md: functions fit on a screen; split it, or mark a data table '
              f'with "{TABLE_MARK}")')
    if over:
        return 1
    tables = sum(1 for x in found if x[4])
    print(f'check-function-length: {len(found)} functions in {len(files)} files, none over '
          f'{args.max} lines ({tables} data table(s) exempt)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
