#!/usr/bin/env python3
"""Checks that every name a doc page cites exists in the code as named.

Usage: check-doc-names.py [docs/PAGE.md ...]   (default: docs/architecture.md)

What a page cites in backticks (fenced code blocks are pictures, not read):

- Paths. A span with a `/` whose first component is a top-level entry of the
  repository (`proxy/relay.cc`, `base/`, `test/e2e/`, `debian/changelog`), or,
  in a table row or section about a folder, a path inside that folder
  (`builtin/settings.h` in "### hooks/"), must exist. A bare file name with a
  source extension (`relay.h`, `check-layers.py`) must exist inside the
  row's or section's folder, or anywhere when the text names no folder. A
  file a meson.build generates counts when that folder's meson.build names
  it as a string (`runtime_v1.rpcs.h`). A `<placeholder>` ends what is
  checked at the folder before it; a `*` component must match a file.
- Types. A PascalCase identifier (`Transparent`, `nri::Front`,
  `Current<Snapshot>`; no underscore, STYLE.md) must be defined in the C++
  (`class`/`struct`/`union`/`enum`/`enum class` with a body, or `using Foo
  =`) or declared in a .proto (message, service, rpc, enum or enum value);
  one the code only calls (protobuf's `ParseFromArray`) is a function. A
  qualifier that is not one of crihook's namespaces (`absl::StatusOr`) marks
  a library's name: skipped.
- Members. `Foo::bar` (also `Foo::bar()`, `Foo::bar.baz`): Foo as above, and
  `bar` is a word of the code (comments and strings left out) of the files
  that define Foo, their .h/.cc twins, and, for `using Foo = Bar<...>`, Bar's.
- Threads. The first column of the table under "## Threading model" whose
  header is `thread`: each `lower-case-name` outside brackets is a name
  crihook's programs (not test/, bench/, fuzz/) give a thread: a literal
  passed to namedThread / setThreadName / prctl(PR_SET_NAME), `prefix-N` for
  cat("prefix-", n), a literal passed to the constructor of a class whose
  threads take the name it is given (GrowingPool), or a program's name
  (executable() in a meson.build: its main thread). At most 15 bytes: the
  kernel keeps no more.

ALLOWED lists the few names that are not crihook's code, with the reason.
Prints one line per name not found (`PAGE:LINE: `name`: ... not found`) and
exits 1; exits 0 with a count otherwise.
"""
import fnmatch
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cxx_source  # noqa: E402
from markdown_text import blank_fences  # noqa: E402

# Names the pages cite that are other software's, not crihook's code.
ALLOWED = {
    'Device': "Koordinator's Device object (its CRD), which koordlet writes and report.h mirrors",
    'PreRemoveRunPodSandbox': "a Koordinator hook type registration files name; not in its proto",
}
SOURCE_EXT = ('.h', '.cc', '.py', '.sh', '.proto', '.in', '.go', '.build', '.md', '.txt',
              '.toml', '.service', '.socket', '.conf')
MAX_THREAD_NAME = 15

SPAN = re.compile(r'`([^`]+)`')
PATHLIKE = re.compile(r'^[A-Za-z0-9_.<>*/+-]+$')
# [ns::]*Type[<args>][::member][.field][(args)]
# [ns::]*Type[<args>][::member[.field]][(args)]; types have no underscore (STYLE.md).
NAME = re.compile(r'^((?:[a-z_][a-z0-9_]*::)*)'
                  r'([A-Z][A-Za-z0-9]*)'
                  r'(?:<[^`]*>)?'
                  r'(?:::(~?[A-Za-z_][A-Za-z0-9_]*)(?:\.[a-z_][A-Za-z0-9_.]*)?)?'
                  r'(?:\([^`]*\))?$')
THREAD = re.compile(r'^[a-z][a-z0-9-]*$')


class Repo:
    def __init__(self, root):
        self.root = root
        self.files = subprocess.check_output(
            ['git', '-C', root, 'ls-files', '--cached', '--others', '--exclude-standard'],
            text=True).split('\n')
        self.files = [f for f in self.files if f and os.path.exists(os.path.join(root, f))]
        self.fileset = set(self.files)
        self.dirs = set()
        for f in self.files:
            parts = f.split('/')
            for i in range(1, len(parts)):
                self.dirs.add('/'.join(parts[:i]))
        self.top = {f.split('/', 1)[0] for f in self.files}
        self.by_base = {}
        for f in self.files:
            self.by_base.setdefault(os.path.basename(f), []).append(f)
        self._raw = {}
        self._code = {}
        self._index()

    def raw(self, f):
        if f not in self._raw:
            with open(os.path.join(self.root, f), encoding='utf-8', errors='replace') as fh:
                self._raw[f] = fh.read()
        return self._raw[f]

    def code(self, f):
        if f not in self._code:
            self._code[f] = cxx_source.strip(self.raw(f))
        return self._code[f]

    def _index(self):
        self.types = {}       # name -> files defining it
        self.aliases = {}     # name -> aliased type names
        self.namespaces = set()
        cxx = [f for f in self.files if f.endswith(('.h', '.cc'))]
        # class ABSL_LOCKABLE TimedMutex {, struct [[nodiscard]] Foo final : Base
        typedef = re.compile(r'\b(?:class|struct|union|enum(?:\s+class)?)\s+'
                             r'(?:(?:\[\[[^\]]*\]\]|[A-Z][A-Z0-9_]*(?:\([^)]*\))?)\s+)*'
                             r'([A-Za-z_]\w*)\s*(?:final\s*)?(?:[:{]|$)', re.M)
        self.calls = set(re.findall(r'(?:\.|->|::|\b)([A-Z][A-Za-z0-9]*)\s*\(', ''.join(
            self.code(f) for f in cxx)))
        using = re.compile(r'\busing\s+([A-Za-z_]\w*)\s*=\s*([^;]+);')
        for f in cxx:
            code = self.code(f)
            for m in typedef.finditer(code):
                self.types.setdefault(m.group(1), set()).add(f)
            for m in using.finditer(code):
                self.types.setdefault(m.group(1), set()).add(f)
                self.aliases.setdefault(m.group(1), set()).update(
                    re.findall(r'\b[A-Z]\w*', m.group(2)))
            for m in re.finditer(r'\bnamespace\s+([\w:]+)\s*\{', code):
                self.namespaces.update(m.group(1).split('::'))
        proto = re.compile(r'^\s*(?:message|service|enum|rpc)\s+([A-Za-z_]\w*)|'
                           r'^\s*([A-Za-z_]\w*)\s*=\s*\d+\s*;', re.M)
        for f in self.files:
            if f.endswith('.proto'):
                for m in proto.finditer(self.raw(f)):
                    self.types.setdefault(m.group(1) or m.group(2), set()).add(f)
        self.meson_strings = {}  # folder -> strings its meson.build names
        for f in self.files:
            if os.path.basename(f) == 'meson.build':
                self.meson_strings[os.path.dirname(f)] = set(
                    re.findall(r"'([^'\n]+)'", self.raw(f)))

    def exists(self, path):
        p = path.rstrip('/')
        return p in self.fileset or p in self.dirs or p == ''

    def generated(self, path):
        return os.path.basename(path) in self.meson_strings.get(os.path.dirname(path), ())


def line_of(text, offset):
    return text.count('\n', 0, offset) + 1


def contexts(repo, text):
    """For each line, the folder the text is about: a `### folder/` section, or
    a table row whose first cell is a folder."""
    out = []
    section = None
    for line in text.split('\n'):
        h = re.match(r'^#+\s+`?([a-z][\w.-]*(?:/[\w.-]+)*/)`?\s*$', line)
        if h:
            section = h.group(1)
        elif line.startswith('#'):
            section = None
        row = re.match(r'^\|\s*`([a-z][\w.-]*(?:/[\w.-]+)*/)`\s*\|', line)
        if row and section and not repo.exists(row.group(1)):
            out.append(section + row.group(1))  # `builtin/devices/` in "### hooks/"
        else:
            out.append(row.group(1) if row else section)
    return out


def check_path(repo, span, folder):
    """None when the path exists; otherwise why not."""
    path = span.strip('"')
    if path.startswith('/'):
        return None  # the host's (/proc/..., /var/lib/crihook) or a URL path (/healthz)
    if '/' in path:
        first = path.split('/', 1)[0]
        if first in repo.top:
            base = ''
        elif folder and repo.exists(folder + first) or (folder and first.startswith('<')):
            base = folder
        else:
            return None  # not a path of this repository (/proc/..., golang.org/...)
        full = base + path
        parts = full.split('/')
        for i, part in enumerate(parts):
            if '<' in part:
                prefix = '/'.join(parts[:i])
                return None if repo.exists(prefix) else f'folder {prefix}/ not found'
            if '*' in part:
                if any(fnmatch.fnmatch(f, full.rstrip('/')) for f in repo.files):
                    return None
                return f'no file matching {full} found'
        if repo.exists(full) or repo.generated(full):
            return None
        return f'no file or folder {full} found'
    if not path.endswith(SOURCE_EXT) or path.startswith(('.', '*', '<')):
        return None
    found = repo.by_base.get(path, [])
    generated = [d for d, names in repo.meson_strings.items() if path in names]
    if folder:
        if any(f.startswith(folder) for f in found) or any(
                (d + '/').startswith(folder) for d in generated):
            return None
        return f'no file {path} under {folder} found'
    return None if found or generated else f'no file {path} found'


def check_name(repo, span):
    """None when the type (and member) exists or the span is no type name."""
    m = NAME.match(span)
    if not m:
        return None
    ns, name, member = m.group(1), m.group(2), m.group(3)
    if not re.search(r'[a-z]', name):
        return None  # CONSTANT_CASE, a single letter: not a type name
    if ns and any(n not in repo.namespaces for n in ns.split('::') if n):
        return None  # a library's name (absl::, std::, grpc::)
    if name in ALLOWED:
        return None
    if name not in repo.types and not member and name in repo.calls:
        return None  # a function the code calls (protobuf's ParseFromArray)
    if name not in repo.types:
        return f'type {name} not found (no class, struct, enum, using or proto declaration)'
    if not member:
        return None
    files = set()
    todo, seen = [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for f in repo.types.get(t, ()):
            stem = f.rsplit('.', 1)[0]
            files.update(g for g in (f, stem + '.h', stem + '.cc') if g in repo.fileset)
        todo.extend(repo.aliases.get(t, ()))
    word = re.compile(r'(?<![\w])' + re.escape(member.lstrip('~')) + r'(?![\w])')
    for f in files:
        text = repo.code(f) if f.endswith(('.h', '.cc')) else repo.raw(f)
        if word.search(text):
            return None
    return f'member {member} of {name} not found in {", ".join(sorted(files))}'


# Not crihook's own programs: their threads and mains are no thread of the table.
NOT_DAEMON = ('test/', 'bench/', 'fuzz/')


def thread_names(repo):
    """Every name crihook's programs give a thread: literals, and 'prefix-N' patterns."""
    names = set()
    passers = set()  # classes whose threads take the name they are given
    call = re.compile(r'\b(?:namedThread|setThreadName)\s*\(|\bPR_SET_NAME\s*,')
    for f in repo.files:
        if not f.endswith(('.h', '.cc')) or f == 'base/thread_name.h' or f.startswith(NOT_DAEMON):
            continue
        code, raw = repo.code(f), repo.raw(f)
        for m in call.finditer(code):
            arg = raw[m.end():m.end() + 200].lstrip()
            lit = re.match(r'"([^"]*)"', arg)
            pre = re.match(r'cat\(\s*"([^"]*)"\s*,', arg)
            if lit:
                names.add(lit.group(1))
            elif pre:
                names.add(pre.group(1) + 'N')
            elif re.match(r'[A-Za-z_]\w*\s*[,)]', arg):
                defs = list(re.finditer(r'^[^\n;{}]*?\b([A-Z]\w*)::~?\w+\s*\(', code[:m.start()],
                                        re.M))
                if defs:
                    passers.add(defs[-1].group(1))
    daemon = [f for f in repo.files if f.endswith(('.h', '.cc')) and not f.startswith(NOT_DAEMON)]
    for cls in passers:
        for f in daemon:
            code, raw = repo.code(f), repo.raw(f)
            # GrowingPool decoders_{"decode", 4}; make_unique<GrowingPool>("x", 2)
            for m in re.finditer(r'\b' + cls + r'(?:\s+\w+\s*|\s*>\s*)?[({]\s*"', code):
                names.update(re.findall(r'^"([^"]*)"', raw[m.end() - 1:]))
            # a member `GrowingPool pool_;` given its name in its class's constructor
            for member in re.findall(r'\b' + cls + r'\s+(\w+)\s*;', code):
                stem = f.rsplit('.', 1)[0]
                for g in (stem + '.h', stem + '.cc'):
                    if g in repo.fileset:
                        for m in re.finditer(r'\b' + member + r'\s*[({]\s*"', repo.code(g)):
                            names.update(re.findall(r'^"([^"]*)"', repo.raw(g)[m.end() - 1:]))
    for f in repo.files:
        if os.path.basename(f) == 'meson.build' and not f.startswith(NOT_DAEMON):
            names.update(re.findall(r"\bexecutable\(\s*'([^']+)'", repo.raw(f)))
    return names


def check_threads(repo, text, given):
    """(line, name, why) for each thread of the threads table the code does not name."""
    out = []
    sec = re.search(r'^## Threading model\n(.*?)(?=^## |\Z)', text, re.M | re.S)
    if not sec:
        return out
    start = sec.start(1)
    rows = sec.group(1).split('\n')
    offset = start
    in_table = False
    for line in rows:
        cells = line.split('|')
        if not in_table and len(cells) > 2 and cells[1].strip() == 'thread':
            in_table = True
        elif in_table and not line.startswith('|'):
            break
        elif in_table and not re.match(r'^\|[-| ]+\|$', line):
            first = cells[1]
            while re.search(r'\([^()]*\)', first):  # what is in brackets describes it
                first = re.sub(r'\([^()]*\)', '', first)
            for name in SPAN.findall(first):
                if not THREAD.match(name):
                    continue
                n = line_of(text, offset)
                shown = name.replace('-N', '-1') if name.endswith('-N') else name
                if name not in given:
                    out.append((n, name, 'thread name not found as one the code gives a thread'))
                elif len(shown.encode()) > MAX_THREAD_NAME:
                    out.append((n, name, f'thread name over {MAX_THREAD_NAME} bytes, '
                                         'which the kernel cuts'))
        offset += len(line) + 1
    return out


def check_page(repo, page, threads):
    with open(os.path.join(repo.root, page), encoding='utf-8') as fh:
        text = fh.read()
    body = blank_fences(text)
    ctx = contexts(repo, body)
    problems = []
    counted = 0
    for m in SPAN.finditer(body):
        span = re.sub(r'\s*\n\s*', ' ', m.group(1)).strip()
        n = line_of(body, m.start())
        why = None
        if PATHLIKE.match(span.strip('"')) and ('/' in span or span.endswith(SOURCE_EXT)):
            why = check_path(repo, span, ctx[n - 1])
        else:
            why = check_name(repo, span)
        counted += 1
        if why:
            problems.append((n, span, why))
    problems += check_threads(repo, text, threads)
    for n, span, why in sorted(problems):
        print(f'{page}:{n}: `{span}`: {why}')
    return counted, len(problems)


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    repo = Repo(root)
    threads = thread_names(repo)
    pages = argv[1:] or ['docs/architecture.md']
    total = bad = 0
    for page in pages:
        rel = os.path.relpath(os.path.abspath(page), root) if os.path.exists(page) else page
        counted, problems = check_page(repo, rel, threads)
        total += counted
        bad += problems
    if bad:
        return 1
    print(f'check-doc-names: {total} cited names of {", ".join(pages)} found')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
