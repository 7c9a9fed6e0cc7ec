#!/usr/bin/env python3
"""Generated mutation check: plants bugs made mechanically from the source,
one at a time, and reports which ones the unit and integration suites catch.

scripts/mutate.sh runs a hand-written list (test/mutations.txt); this tool
makes its mutants from the code itself, so that what it measures is not the
blind spots of whoever wrote the tests.

Usage:
  scripts/mutagen.py count [--folders F ...]
      the candidates per folder and per operator
  scripts/mutagen.py sample --seed S [--size N] [--folders F ...]
      the mutants a run with this seed would plant (id, place, change)
  scripts/mutagen.py show ID
      one mutant as a diff
  scripts/mutagen.py coverage [--build-cov DIR]
      builds the tree with --coverage into DIR (build-cov), runs each unit
      and integration test alone, and writes DIR/mutagen-coverage.json:
      which tests run which line
  scripts/mutagen.py run --seed S [--size N] [--build DIR] [--report FILE]
                         [--only ID ...] [--folders F ...] [--coverage FILE]
      plants each sampled mutant, builds what its tests need, runs them
      (the test named after the file first, then the fastest first, until
      one fails or times out), restores the file, and reports. With the
      coverage data (where a file is as it was when it was measured), only
      the tests that run the mutant's line run, and a line no test runs is a
      survivor without a build; elsewhere every test that links the file
      (also in files whose code runs in forked children ending with _exit,
      for which gcov writes nothing: UNCOUNTED_CHILDREN).

Mutants (operators), made from each .cc file of the source folders, with
comments, string literals, preprocessor lines, log statements, static
asserts and Abseil annotations left out:
  rel      == and != swapped; < <= > >= moved by one (only spaced, binary)
  logic    && and || swapped
  not      a `!` dropped
  bool     true and false swapped
  const    an integer literal plus or minus one
  arith    binary + and - swapped (spaced)
  stmt     a one-line expression statement replaced by nothing
  cond     an `if`'s one-line condition replaced by true, or by false
  return   `return true;`/`return false;` swapped; `return absl::OkStatus();`
           made an error

A mutant's id is a hash of its file, the text of its line, the operator and
its place in the line, so it stays the same while its line does.

Results: killed (a test failed, or ran past its time twice: the second time
with its own meson timeout, so a loaded machine does not pass a slow test
off as a kill; such kills are marked "timed out"), survived (every test
that covers the file passed), stillborn (it does not compile: not a bug a
user could have; left out of the score), equivalent (listed with a reason
in test/mutants-equivalent.txt: left out of the score). The score is killed
/ (killed + survived). The sample is drawn with the seed, every folder
represented (at least --min-per-folder mutants each, the rest in proportion
to the folder's candidates).

Which tests cover a file is read from build.ninja: the unit and integration
tests whose programs, or the programs they depend on (crihookd and the
module host for the integration tests), link the file's object.
"""
import argparse
import hashlib
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the tree (the package test copies it)
from  cxx_source import strip  # comments and literals blanked, lengths kept

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ["base", "cri", "proxy", "nri", "hooks", "topology", "config", "confine", "metrics"]
SUITES = {"crihook:unit", "crihook:integration"}
EQUIVALENTS = ROOT / "test" / "mutants-equivalent.txt"

# --- reading the source ------------------------------------------------------


SKIP_START = re.compile(
    r"^\s*(#|static_assert\b|ABSL_|.*\blog_?(->|\.)(trace|debug|info|warn|error|critical)\()")


def skipped_lines(code_lines):
    """Line numbers (0-based) of preprocessor lines, static asserts, log
    statements and Abseil annotations, each to the end of its statement."""
    skip, i = set(), 0
    while i < len(code_lines):
        line = code_lines[i]
        if SKIP_START.match(line):
            depth = 0
            while i < len(code_lines):
                skip.add(i)
                depth += code_lines[i].count("(") - code_lines[i].count(")")
                stripped = code_lines[i].rstrip()
                if code_lines[i].lstrip().startswith("#"):
                    if not stripped.endswith("\\"):
                        break
                elif depth <= 0 and (stripped.endswith(";") or stripped.endswith("{") or stripped.endswith(")")):
                    break
                i += 1
        i += 1
    return skip


def balanced(s):
    depth = 0
    for c in s:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


STMT = re.compile(r"^(\s*)((?:\+\+|--)?[A-Za-z_][\w]*(?:(?:::|\.|->)[A-Za-z_~][\w]*|\[[^\]]*\])*"
                  r"\s*(?:\(|=(?!=)|\+=|-=|\|=|&=|\+\+|--).*;)\s*$")
IF_COND = re.compile(r"^(\s*(?:\}\s*else\s+)?if\s*\()(.*)(\)\s*(?:\{|[^;{]*;)?\s*)$")
REL_SWAP = {" == ": " != ", " != ": " == ", " < ": " <= ", " <= ": " < ", " > ": " >= ", " >= ": " > "}
NUM = re.compile(r"(?<![\w.'])(\d+)(?:u|U|l|L|ul|UL|ull|ULL|z)?(?![\w.'])")
KEYWORDS_NOT_STATEMENTS = {"return", "break", "continue", "case", "default", "goto", "throw", "delete",
                           "else", "do", "co_return", "co_await", "using", "typedef", "template",
                           "namespace", "friend", "public", "private", "protected", "const", "auto",
                           "static", "constexpr", "inline", "unsigned", "int", "bool", "char", "void",
                           "struct", "class", "enum", "union", "if", "while", "for", "switch",
                           "catch", "sizeof", "try"}


def mutants_of_line(line, code):
    """(operator, start, end, replacement) for one line; positions in the line."""
    out = []
    for op, new in REL_SWAP.items():
        for m in re.finditer(re.escape(op), code):
            out.append(("rel", m.start(), m.end(), new))
    for op, new in ((" && ", " || "), (" || ", " && ")):
        for m in re.finditer(re.escape(op), code):
            out.append(("logic", m.start(), m.end(), new))
    for m in re.finditer(r"!(?!=)(?=[\w(*])", code):
        out.append(("not", m.start(), m.end(), ""))
    for m in re.finditer(r"\b(true|false)\b", code):
        out.append(("bool", m.start(), m.end(), "false" if m.group(1) == "true" else "true"))
    if not re.search(r"\[\s*\d+\s*\]\s*[;=]|^\s*(case|enum)\b|alignas|std::array<", code):
        for m in NUM.finditer(code):
            value = int(m.group(1))
            if len(m.group(1)) > 1 and m.group(1).startswith("0"):
                continue  # octal
            out.append(("const", m.start(1), m.end(1), str(value + 1)))
            if value > 0:
                out.append(("const", m.start(1), m.end(1), str(value - 1)))
    for op, new in ((" + ", " - "), (" - ", " + ")):
        for m in re.finditer(re.escape(op), code):
            out.append(("arith", m.start(), m.end(), new))
    m = STMT.match(code)
    if m and balanced(code) and m.group(2).split("(")[0].split()[0] not in KEYWORDS_NOT_STATEMENTS \
            and not re.match(r"\s*[A-Za-z_][\w:<>]*\s+[A-Za-z_]", code):
        out.append(("stmt", len(m.group(1)), len(line.rstrip()), "(void)0;"))
    m = IF_COND.match(code)
    if m and balanced(m.group(2)) and m.group(2).strip() and "constexpr" not in m.group(1):
        a, b = m.end(1), m.end(2)
        if not re.search(r"[;]", m.group(2)):  # not `if (init; cond)`
            out.append(("cond", a, b, "true"))
            out.append(("cond", a, b, "false"))
    for m in re.finditer(r"\breturn (true|false);", code):
        out.append(("return", m.start(1), m.end(1), "false" if m.group(1) == "true" else "true"))
    for m in re.finditer(r"\breturn absl::OkStatus\(\);", code):
        out.append(("return", m.start() + 7, m.end() - 1, 'absl::InternalError("mutant")'))
    return out


def source_files(folders):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.cc")):
            rel = path.relative_to(ROOT).as_posix()
            if "/test" in rel or rel.endswith("_test.cc"):
                continue
            yield rel


def generate(folders):
    """Every candidate mutant: dicts with id, file, line (1-based), op, start,
    end, new, before (the line), after."""
    out = []
    for rel in source_files(folders):
        text = (ROOT / rel).read_text(encoding="utf-8")
        lines = text.split("\n")
        code_lines = strip(text).split("\n")
        skip = skipped_lines(code_lines)
        for no, (line, code) in enumerate(zip(lines, code_lines)):
            if no in skip or not code.strip():
                continue
            seen = {}
            for op, a, b, new in mutants_of_line(line, code):
                after = line[:a] + new + line[b:]
                if after == line:
                    continue
                key = (op, a, b, new)
                if key in seen:
                    continue
                seen[key] = True
                digest = hashlib.sha1(f"{rel}\0{line.strip()}\0{op}\0{a - (len(line) - len(line.lstrip()))}\0{new}"
                                      .encode()).hexdigest()[:10]
                out.append({"id": digest, "file": rel, "folder": rel.split("/")[0], "line": no + 1, "op": op,
                            "start": a, "end": b, "new": new, "before": line, "after": after})
    # Same id twice (the same line twice in a file): keep the first.
    unique, ids = [], set()
    for m in out:
        if m["id"] not in ids:
            ids.add(m["id"])
            unique.append(m)
    return unique


def draw(candidates, seed, size, min_per_folder):
    """A seeded sample, every folder represented."""
    rng = random.Random(seed)
    by_folder = {}
    for m in candidates:
        by_folder.setdefault(m["folder"], []).append(m)
    total = len(candidates)
    quota = {f: min(len(ms), min_per_folder) for f, ms in by_folder.items()}
    left = size - sum(quota.values())
    if left > 0:
        shares = {f: len(ms) / total * left for f, ms in by_folder.items()}
        for f in sorted(by_folder, key=lambda f: shares[f] - int(shares[f]), reverse=True):
            quota[f] = min(len(by_folder[f]), quota[f] + int(shares[f]))
        # what rounding left, one each, largest folders first
        spare = size - sum(quota.values())
        for f in sorted(by_folder, key=lambda f: len(by_folder[f]), reverse=True):
            if spare <= 0:
                break
            if quota[f] < len(by_folder[f]):
                quota[f] += 1
                spare -= 1
    sample = []
    for f in sorted(by_folder):
        sample += rng.sample(by_folder[f], quota[f])
    rng.shuffle(sample)
    return sample


def equivalents():
    out = {}
    if EQUIVALENTS.exists():
        for no, line in enumerate(EQUIVALENTS.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            mid, _, reason = line.partition("\t")
            if not reason.strip():
                sys.exit(f"{EQUIVALENTS}:{no}: mutant {mid} has no reason")
            out[mid.strip()] = reason.strip()
    return out


# --- which tests cover which file --------------------------------------------


def read_ninja(build):
    """{output: [inputs]} from build.ninja's build lines (explicit and implicit)."""
    edges = {}
    for line in (build / "build.ninja").read_text().splitlines():
        if not line.startswith("build "):
            continue
        head, _, rest = line[6:].partition(": ")
        rest = rest.split(" || ")[0]
        parts = rest.replace(" | ", " ").split()
        for out in head.split():
            edges[out] = parts[1:]
    return edges


def coverage(build):
    """{source file: [meson test names]}, for the unit and integration tests."""
    intro = lambda what: json.loads(subprocess.run(  # noqa: E731
        ["meson", "introspect", str(build), what], check=True, capture_output=True, text=True).stdout)
    tests = [t for t in intro("--tests") if SUITES & set(t["suite"])]
    targets = {t["id"]: t for t in intro("--targets")}
    edges = read_ninja(build)
    memo = {}

    def sources(out):
        if out in memo:
            return memo[out]
        memo[out] = set()
        found = set()
        for i in edges.get(out, []):
            if i.startswith("../"):
                found.add(i[3:])
            elif i in edges and (i.endswith(".o") or i.endswith(".a") or i.endswith(".so") or "." not in i.split("/")[-1]):
                found |= sources(i)
        memo[out] = found
        return found

    covers = {}
    for t in tests:
        outs = [os.path.relpath(t["cmd"][0], build)]
        for d in t.get("depends", []):
            for f in targets.get(d, {}).get("filename", []):
                outs.append(os.path.relpath(f, build))
        srcs = set()
        for o in outs:
            srcs |= sources(o)
        for s in srcs:
            covers.setdefault(s, []).append(t["name"])
    return covers, {t["name"]: t for t in tests}, targets


def programs_of(test, build, targets):
    outs = [os.path.relpath(test["cmd"][0], build)]
    for d in test.get("depends", []):
        outs += [os.path.relpath(f, build) for f in targets.get(d, {}).get("filename", [])]
    return outs


# --- which tests run which line (a coverage build) -----------------------------


def file_digest(rel):
    return hashlib.sha1((ROOT / rel).read_bytes()).hexdigest()


def cmd_coverage(args):
    """Builds the tree with --coverage in its own folder, runs each unit and
    integration test alone with its counters in a folder of its own, and
    writes which tests ran which line of each source file."""
    cov = (ROOT / args.build_cov).resolve()
    if not (cov / "build.ninja").exists():
        subprocess.run(["meson", "setup", str(cov), "--buildtype=debug", "-Db_coverage=true"],
                       check=True, stdout=subprocess.DEVNULL)
    ok, log = ninja(cov, [])
    if not ok:
        sys.exit(f"mutagen: the coverage build failed:\n{log}")
    _, tests, _ = coverage(cov)
    out = cov / "mutagen-counters"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    strip = len(cov.parts) - 1
    failed = []
    for k, name in enumerate(sorted(tests), 1):
        env = dict(os.environ, GCOV_PREFIX=str(out / name), GCOV_PREFIX_STRIP=str(strip))
        t0 = time.monotonic()
        passed = run_test(cov, name, (tests[name].get("timeout") or 300) * 2, env)
        print(f"[{k}/{len(tests)}] {name}: {'ran' if passed else 'FAILED'} ({time.monotonic() - t0:.0f} s)",
              flush=True)
        if not passed:
            failed.append(name)
    if failed:
        sys.exit(f"mutagen: tests failed in the coverage build: {' '.join(failed)}")
    lines = {}  # source -> line -> tests; 0 runs recorded as an empty list
    for name in sorted(tests):
        tdir = out / name
        gcdas = sorted(tdir.rglob("*.gcda"))
        for g in gcdas:
            link = g.with_suffix(".gcno")
            if not link.exists():
                link.symlink_to(cov / g.relative_to(tdir).with_suffix(".gcno"))
        for i in range(0, len(gcdas), 200):
            r = subprocess.run(["gcov", "-t", "-j"] + [str(g.relative_to(tdir)) for g in gcdas[i:i + 200]],
                               cwd=tdir, capture_output=True, text=True)
            for doc in r.stdout.splitlines():
                if not doc.startswith("{"):
                    continue
                d = json.loads(doc)
                for f in d.get("files", []):
                    src = os.path.relpath(os.path.normpath(os.path.join(d["current_working_directory"], f["file"])),
                                          ROOT)
                    if src.startswith("..") or not src.endswith(".cc"):
                        continue
                    per = lines.setdefault(src, {})
                    for ln in f["lines"]:
                        runs = per.setdefault(str(ln["line_number"]), [])
                        if ln["count"] > 0 and name not in runs:
                            runs.append(name)
    data = {"tests": sorted(tests),
            "files": {src: {"sha1": file_digest(src), "lines": per} for src, per in lines.items()
                      if (ROOT / src).exists()}}
    target = cov / "mutagen-coverage.json"
    target.write_text(json.dumps(data))
    print(f"mutagen: {target}: {len(data['files'])} source files, {len(tests)} tests")
    return 0


# Files with code that runs in processes that end with _exit (forked
# children: the spawner and its workers, the launcher's children; the module
# host's watchdog): gcov writes nothing for those processes, so the coverage
# data would call their lines unrun. Their mutants run every test that links
# the file instead.
UNCOUNTED_CHILDREN = {"confine/spawner.cc", "confine/launcher.cc", "hooks/module/module_host.cc"}


def tests_running(m, cov_data, linked):
    """The tests that run the mutant's line, when the coverage data knows the
    file as it is now; else every test that links it. None: the line is
    compiled in but no test runs it."""
    if m["file"] in UNCOUNTED_CHILDREN:
        return linked
    f = (cov_data or {}).get("files", {}).get(m["file"])
    if not f or f["sha1"] != file_digest(m["file"]):
        return linked
    runs = f["lines"].get(str(m["line"]))
    if runs is None:
        return linked  # no code of its own on the line (a declaration, a brace)
    # Tests newer than the coverage data: every one that links the file.
    return [n for n in linked if n in runs or n not in known_tests(cov_data)] or None


def known_tests(cov_data):
    """The tests the coverage data was made with (older data: those it names)."""
    if "known" not in cov_data:
        cov_data["known"] = set(cov_data.get("tests") or
                                {n for f in cov_data["files"].values() for runs in f["lines"].values()
                                 for n in runs})
    return cov_data["known"]


# --- running -------------------------------------------------------------------


class Planted:
    """One mutant in its file, restored (with a new mtime) however we leave."""

    def __init__(self, m):
        self.path = ROOT / m["file"]
        self.original = self.path.read_text(encoding="utf-8")
        lines = self.original.split("\n")
        if lines[m["line"] - 1] != m["before"]:
            raise RuntimeError(f"{m['file']}:{m['line']} changed since the mutant was made")
        lines[m["line"] - 1] = m["after"]
        self.mutated = "\n".join(lines)

    def __enter__(self):
        self.path.write_text(self.mutated, encoding="utf-8")
        return self

    def __exit__(self, *exc):
        self.path.write_text(self.original, encoding="utf-8")
        return False


def run_test(build, name, timeout, env=None):
    """True when the test passed within its time."""
    return test_outcome(build, name, timeout, env) == "passed"


def test_outcome(build, name, timeout, env=None):
    """"passed", "failed" or "timed out"."""
    p = subprocess.Popen(["meson", "test", "-C", str(build), "--no-rebuild", "--logbase", "mutagen",
                          "--timeout-multiplier", "1", name], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return "passed" if p.wait(timeout=timeout) == 0 else "failed"
    except subprocess.TimeoutExpired:
        # meson starts each test in a session of its own: killing meson's
        # group alone leaves a test that loops spinning, an orphan, for the
        # rest of the run.
        below = descendants(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        for q in below:
            for kill in (lambda: os.killpg(os.getpgid(q), signal.SIGKILL), lambda: os.kill(q, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass  # gone already
        p.wait()
        return "timed out"


def descendants(pid):
    """Every process below `pid`, by the parent links in /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = (pathlib.Path("/proc") / entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def keep_log(build, mutant_id):
    """The killing test's log, kept as build/meson-logs/mutagen-ID.txt (the
    next test run writes over mutagen.txt): what a kill was, to check it."""
    logs = build / "meson-logs"
    try:
        (logs / f"mutagen-{mutant_id}.txt").write_bytes((logs / "mutagen.txt").read_bytes())
    except OSError:
        pass  # no log to keep: the verdict stands without it


def judge_test(build, name, tests, durations):
    """A mutant's test: "passed", "failed" or "timed out" (twice, the second
    time under the test's own meson timeout)."""
    outcome = test_outcome(build, name, max(30.0, 4 * durations[name] + 10))
    if outcome != "timed out":
        return outcome
    return test_outcome(build, name, max(float(tests[name].get("timeout") or 30), 8 * durations[name] + 30))


def ninja(build, outs):
    r = subprocess.run(["ninja", "-C", str(build), "-j2"] + outs, capture_output=True, text=True)
    return r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def order_tests(m, names, durations):
    stem = pathlib.Path(m["file"]).stem
    return sorted(names, key=lambda n: (n != stem, stem not in n, durations.get(n, 60.0), n))


def cmd_run(args):
    build = (ROOT / args.build).resolve()
    candidates = generate(args.folders)
    sample = draw(candidates, args.seed, args.size, args.min_per_folder)
    if args.only:
        sample = [m for m in candidates if m["id"] in set(args.only)]
    dirty = subprocess.run(["git", "status", "--porcelain", "--"] + sorted({m["file"] for m in sample}),
                           cwd=ROOT, capture_output=True, text=True).stdout
    if dirty.strip():
        sys.exit(f"mutagen: uncommitted changes in files to mutate; commit them first:\n{dirty}")
    equiv = equivalents()
    # build.ninja as the tree's meson files say now (a test's new depends),
    # before it is read for what each test needs.
    subprocess.run(["ninja", "-C", str(build), "build.ninja"], capture_output=True)
    covers, tests, targets = coverage(build)
    cov_path = ROOT / args.coverage
    cov_data = json.loads(cov_path.read_text()) if cov_path.exists() else None
    print(f"mutagen: {'coverage from ' + str(cov_path) if cov_data else 'no coverage data: every test that links a file runs for it'}")
    runs = {m["id"]: tests_running(m, cov_data, covers.get(m["file"], [])) for m in sample}
    needed = sorted({n for m in sample for n in (runs[m["id"]] or [])})
    outs = sorted({o for n in needed for o in programs_of(tests[n], build, targets)})
    ok, log = ninja(build, outs)
    if not ok:
        sys.exit(f"mutagen: the unmutated tree does not build:\n{log}")
    durations = {}
    print(f"mutagen: seed {args.seed}, {len(sample)} mutants of {len(candidates)} candidates; "
          f"baseline of {len(needed)} tests", flush=True)
    for n in needed:  # every test green first, and how long each takes
        t0 = time.monotonic()
        if not run_test(build, n, tests[n].get("timeout", 300) or 300):
            sys.exit(f"mutagen: test {n} fails on the unmutated tree: no mutant can be judged")
        durations[n] = time.monotonic() - t0
    results = []
    interrupted = []
    signal.signal(signal.SIGTERM, lambda *_: (interrupted.append(1), (_ for _ in ()).throw(KeyboardInterrupt)))
    report = open(args.report, "w") if args.report else None
    try:
        for k, m in enumerate(sample, 1):
            t0 = time.monotonic()
            names = order_tests(m, runs[m["id"]] or [], durations)
            if m["id"] in equiv:
                result, by = "equivalent", equiv[m["id"]]
            elif runs[m["id"]] is None:
                result, by = "survived", "no test runs the line"
            elif not names:
                result, by = "survived", "no unit or integration test links the file"
            else:
                result, by = "survived", ""
                with Planted(m):
                    for i, n in enumerate(names):
                        ok, log = ninja(build, programs_of(tests[n], build, targets))
                        if not ok:
                            result, by = "stillborn", log.strip().splitlines()[-1][:160] if log.strip() else ""
                            break
                        outcome = judge_test(build, n, tests, durations)
                        if outcome != "passed":
                            result, by = "killed", n if outcome == "failed" else f"{n} (timed out)"
                            keep_log(build, m["id"])
                            break
            row = dict(m, result=result, by=by, seconds=round(time.monotonic() - t0, 1))
            results.append(row)
            print(f"[{k}/{len(sample)}] {m['id']} {m['file']}:{m['line']} {m['op']}: {result}"
                  f"{' by ' + by if by else ''} ({row['seconds']} s)", flush=True)
            if report:
                report.write(json.dumps(row) + "\n")
                report.flush()
    except KeyboardInterrupt:
        print("mutagen: interrupted; the file under mutation is restored", file=sys.stderr)
    finally:
        # the restored files' programs, rebuilt
        ninja(build, outs)
    summarise(results)
    return 0 if score(results) >= args.require else 1


def score(results):
    k = sum(r["result"] == "killed" for r in results)
    s = sum(r["result"] == "survived" for r in results)
    return 100.0 * k / (k + s) if k + s else 100.0


def summarise(results):
    folders = sorted({r["folder"] for r in results})
    print("\nfolder     killed survived stillborn equivalent  score")
    for f in folders + ["all"]:
        rs = [r for r in results if f in ("all", r["folder"])]
        c = {x: sum(r["result"] == x for r in rs) for x in ("killed", "survived", "stillborn", "equivalent")}
        print(f"{f:10} {c['killed']:6} {c['survived']:8} {c['stillborn']:9} {c['equivalent']:10}  "
              f"{score(rs):5.1f} %")
    survivors = [r for r in results if r["result"] == "survived"]
    if survivors:
        print("\nsurvived:")
        for r in survivors:
            print(f"  {r['id']}  {r['file']}:{r['line']} {r['op']}: {r['before'].strip()}  ->  "
                  f"{r['after'].strip()}{'  (' + r['by'] + ')' if r['by'] else ''}")


def cmd_count(args):
    candidates = generate(args.folders)
    table = {}
    for m in candidates:
        table.setdefault(m["folder"], {}).setdefault(m["op"], 0)
        table[m["folder"]][m["op"]] += 1
    ops = ["rel", "logic", "not", "bool", "const", "arith", "stmt", "cond", "return"]
    print("folder     " + " ".join(f"{o:>6}" for o in ops) + "   total")
    for f in sorted(table):
        print(f"{f:10} " + " ".join(f"{table[f].get(o, 0):6}" for o in ops) + f"   {sum(table[f].values()):5}")
    print(f"all: {len(candidates)}")


def cmd_sample(args):
    for m in draw(generate(args.folders), args.seed, args.size, args.min_per_folder):
        print(f"{m['id']}  {m['file']}:{m['line']} {m['op']}: {m['before'].strip()}  ->  {m['after'].strip()}")


def cmd_show(args):
    for m in generate(FOLDERS):
        if m["id"] == args.id:
            print(f"--- {m['file']}:{m['line']} ({m['op']})\n-{m['before']}\n+{m['after']}")
            return 0
    sys.exit(f"mutagen: no mutant {args.id} in the current source")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("count", "sample", "run"):
        s = sub.add_parser(name)
        s.add_argument("--folders", nargs="+", default=FOLDERS)
        if name != "count":
            s.add_argument("--seed", type=int, required=True)
            s.add_argument("--size", type=int, default=200)
            s.add_argument("--min-per-folder", type=int, default=8)
    r = sub.choices["run"]
    r.add_argument("--build", default="build")
    r.add_argument("--coverage", default="build-cov/mutagen-coverage.json",
                   help="what `mutagen.py coverage` wrote (used where it matches the source)")
    r.add_argument("--report", help="one JSON line per mutant, written as it is judged")
    r.add_argument("--only", nargs="+", help="these mutant ids only (any in the current source)")
    r.add_argument("--require", type=float, default=0.0, help="exit 1 below this score (percent)")
    sub.add_parser("show").add_argument("id")
    sub.add_parser("coverage").add_argument("--build-cov", default="build-cov")
    args = p.parse_args()
    os.chdir(ROOT)
    return {"count": cmd_count, "sample": cmd_sample, "run": cmd_run, "show": cmd_show,
            "coverage": cmd_coverage}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
