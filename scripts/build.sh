#!/usr/bin/env bash
# Installs the Debian dependencies and builds crihook into ./build, every
# compile through ccache (scripts/ccache.sh).
#
#   scripts/build.sh        everything the test suite runs
#   scripts/build.sh demo   only what scripts/run-demo.sh runs: crihookd and
#                           crihookctl (the demo's hooks are built into crihookd)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in
  all) tests=true targets=() ;;
  demo) tests=false targets=(tools/crihookd tools/crihookctl/crihookctl) ;;
  *) echo "usage: build.sh [all|demo]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh "$what"
. scripts/ccache.sh
ccache_mark
# The tests option of the configured build: True or False.
tests_option() {
  meson introspect build --buildoptions |
    python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "tests"][0])'
}
if [[ ! -f build/build.ninja ]]; then
  # The demo's build configures no tests (they need Go and GoogleTest's
  # whole list); a later full build turns them on in the same directory.
  meson setup build --buildtype=release -Dtests="$tests"
elif [[ $tests == true ]] && [[ $(tests_option) != True ]]; then
  meson configure build -Dtests=true
fi
ninja -C build -j2 "${targets[@]}"
echo "build: $(ccache_hits)"
