#!/usr/bin/env bash
# Mutation check: plants each bug of a small list kept in the repo
# (test/mutations.txt), builds what the named tests need, runs those tests,
# and reports which bugs they caught (killed) and which they missed
# (survived). Not part of CI: each mutation is an incremental build plus a
# test run, minutes on 2 cores.
#
# Usage: scripts/mutate.sh [--list] [--no-baseline] [--build DIR] [--file LIST] [NUM|NAME ...]
#   --list         print the numbered list and exit
#   --no-baseline  skip the first run of the tests on the unmutated tree
#   --build DIR    the meson build directory (default: build; configured if absent)
#   --file LIST    the mutation list (default: test/mutations.txt)
#   NUM|NAME       run only these mutations (by number in --list, or by name)
#
# The list: one mutation a line, five fields separated by TABs:
#   name  file  pattern  replacement  tests
# `pattern` is literal text that must occur exactly once in `file` (the
# script refuses the whole list otherwise); `replacement` (may be empty) takes its place; in
# both, \n is a newline, \t a tab and \\ a backslash. `tests` are meson test
# names, separated by spaces, expected to fail with the bug. Lines starting
# with # and blank lines are ignored.
#
# Each mutated file is saved first and restored after its mutation, also when
# the script is interrupted; the script refuses to start when a listed file
# has uncommitted changes. Results: killed (a test failed), survived (all
# passed: the exit status is 1), error (the build failed: counted as killed,
# shown apart). At the end the tests' programs are rebuilt from the restored
# sources.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
list=test/mutations.txt
baseline=1
only_list=0
selected=()
while (($#)); do
  case $1 in
    --list) only_list=1 ;;
    --no-baseline) baseline=0 ;;
    --build) build=$2; shift ;;
    --file) list=$2; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "mutate.sh: unknown option $1" >&2; exit 2 ;;
    *) selected+=("$1") ;;
  esac
  shift
done

work=$(mktemp -d /tmp/crihook-mutate-XXXXXX)
saved=""    # the file under mutation, while it is mutated
restore() {
  if [[ -n $saved ]]; then
    cp "$work/saved" "$saved"   # a new mtime: ninja rebuilds from the original
    saved=""
  fi
}
cleanup() { restore; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# The list, checked whole before anything is touched: numbered records in
# $work/plan (num, name, file, tests; TAB-separated), or the reasons it is
# refused.
python3 - "$list" "$work/plan" "${selected[@]}" <<'PY'
import sys
path, plan, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]

def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[s[i + 1]])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)

errors, rows, names = [], [], set()
for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
    line = line.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        continue
    f = line.split("\t")
    if len(f) != 5:
        errors.append(f"{path}:{lineno}: expected 5 TAB-separated fields, got {len(f)}")
        continue
    if not all(f[i].strip() for i in (0, 1, 2, 4)):
        errors.append(f"{path}:{lineno}: an empty name, file, pattern or tests field")
        continue
    name, file, pattern, replacement, tests = f
    if name in names:
        errors.append(f"{path}:{lineno}: name {name!r} used twice")
    names.add(name)
    try:
        text = open(file, encoding="utf-8").read()
    except OSError as e:
        errors.append(f"{path}:{lineno}: {name}: {file}: {e.strerror}")
        continue
    n = text.count(unescape(pattern))
    if n != 1:
        errors.append(f"{path}:{lineno}: {name}: the pattern occurs {n} times in {file}, not once")
    if unescape(pattern) == unescape(replacement):
        errors.append(f"{path}:{lineno}: {name}: the replacement is the pattern")
    rows.append((len(rows) + 1, name, file, " ".join(tests.split()), pattern, replacement))
if errors:
    print("mutate.sh: refusing the list:\n  " + "\n  ".join(errors), file=sys.stderr)
    sys.exit(1)
if wanted:
    keep = [r for r in rows if str(r[0]) in wanted or r[1] in wanted]
    unknown = set(wanted) - {str(r[0]) for r in keep} - {r[1] for r in keep}
    if unknown:
        print(f"mutate.sh: no mutation {' '.join(sorted(unknown))} in {path}", file=sys.stderr)
        sys.exit(1)
    rows = keep
with open(plan, "w", encoding="utf-8") as out:
    for r in rows:
        out.write("\t".join(str(x) for x in r) + "\n")
PY

if ((only_list)); then
  printf '%3s  %-34s %-44s %s\n' '#' name file tests
  while IFS=$'\t' read -r num name file tests _; do
    printf '%3s  %-34s %-44s %s\n' "$num" "$name" "$file" "$tests"
  done <"$work/plan"
  exit 0
fi

mapfile -t files < <(cut -f3 "$work/plan" | sort -u)
if [[ -n $(git status --porcelain -- "${files[@]}") ]]; then
  echo "mutate.sh: uncommitted changes in the files to mutate; commit or stash them first:" >&2
  git status --short -- "${files[@]}" >&2
  exit 1
fi

[[ -f $build/build.ninja ]] || meson setup "$build" >/dev/null

# The ninja targets a set of meson tests needs: their programs and depends.
targets_for() {
  python3 - "$build" "$@" <<'PY'
import json, os, subprocess, sys
build, names = sys.argv[1], sys.argv[2:]
intro = lambda what: json.loads(subprocess.run(
    ["meson", "introspect", build, what], check=True, capture_output=True, text=True).stdout)
tests = {t["name"]: t for t in intro("--tests")}
by_id = {t["id"]: t for t in intro("--targets")}
out, missing = set(), []
for n in names:
    t = tests.get(n)
    if t is None:
        missing.append(n)
        continue
    out.add(os.path.relpath(t["cmd"][0], build))
    for d in t.get("depends", []):
        for f in by_id.get(d, {}).get("filename", []):
            out.add(os.path.relpath(f, build))
if missing:
    print(f"mutate.sh: no meson test named {' '.join(missing)}", file=sys.stderr)
    sys.exit(1)
print("\n".join(sorted(out)))
PY
}

mapfile -t all_tests < <(cut -f4 "$work/plan" | tr ' ' '\n' | sort -u)
mapfile -t all_targets < <(targets_for "${all_tests[@]}")
echo "mutate.sh: building ${#all_targets[@]} targets for ${#all_tests[@]} tests"
ninja -C "$build" -j2 "${all_targets[@]}" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  echo "mutate.sh: the unmutated tree does not build" >&2
  exit 1
}
if ((baseline)); then
  echo "mutate.sh: baseline: ${all_tests[*]}"
  if ! meson test -C "$build" --no-rebuild --num-processes 2 --logbase mutate-baseline \
      "${all_tests[@]}" >"$work/baseline.log" 2>&1; then
    tail -40 "$work/baseline.log" >&2
    echo "mutate.sh: the tests fail on the unmutated tree: no mutation can be judged" >&2
    exit 1
  fi
fi

results=()
survivors=0
killed=0
errors=0
# The plan on fd 3: ninja and the tests may read stdin.
while IFS=$'\t' read -r -u 3 num name file tests pattern replacement; do
  start=$SECONDS
  read -ra names <<<"$tests"
  cp "$file" "$work/saved"
  saved=$file
  python3 - "$file" "$pattern" "$replacement" <<'PY'
import sys
def unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s) and s[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[s[i + 1]]); i += 2
        else:
            out.append(s[i]); i += 1
    return "".join(out)
path, pattern, replacement = sys.argv[1], unescape(sys.argv[2]), unescape(sys.argv[3])
text = open(path, encoding="utf-8").read()
assert text.count(pattern) == 1, f"{path}: pattern no longer occurs once"
open(path, "w", encoding="utf-8").write(text.replace(pattern, replacement, 1))
PY
  mapfile -t targets < <(targets_for "${names[@]}")
  log="$work/$num.log"
  if ! ninja -C "$build" -j2 "${targets[@]}" >"$log" 2>&1; then
    outcome=error
    errors=$((errors + 1))
  elif meson test -C "$build" --no-rebuild --num-processes 2 --logbase "mutate-$num" \
      "${names[@]}" >>"$log" 2>&1; then
    outcome=SURVIVED
    survivors=$((survivors + 1))
  else
    outcome=killed
    killed=$((killed + 1))
  fi
  restore
  secs=$((SECONDS - start))
  line=$(printf '%3s  %-34s %-9s %5ss  %s' "$num" "$name" "$outcome" "$secs" "$tests")
  echo "$line"
  results+=("$line")
  if [[ $outcome != killed ]]; then
    mkdir -p "$build/meson-logs"
    cp "$log" "$build/meson-logs/mutate-$num-$name.log"
  fi
done 3<"$work/plan"

echo "mutate.sh: rebuilding the tests' programs from the restored sources"
ninja -C "$build" -j2 "${all_targets[@]}" >"$work/build.log" 2>&1 || cat "$work/build.log" >&2
echo
printf '%3s  %-34s %-9s %6s  %s\n' '#' mutation outcome time tests
printf '%s\n' "${results[@]}"
echo "mutate.sh: ${#results[@]} mutations: $killed killed, $errors build errors, $survivors survived" \
  "(logs of those not killed: $build/meson-logs/mutate-NUM-NAME.log)"
((survivors == 0))
