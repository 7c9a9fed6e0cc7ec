#!/usr/bin/env bash
# The threading model checked by the compiler: builds crihookd, crihookctl
# and every library they link with clang-14's -Wthread-safety as errors
# (into ./build-tsa, through ccache; no optimisation: only the analysis is
# wanted), so that every member declared ABSL_GUARDED_BY a mutex is touched
# with the mutex held and every function declared
# ABSL_EXCLUSIVE_LOCKS_REQUIRED is called with it (base/mutex.h). Then checks
# that the analysis still bites: test/base/thread_safety_violation.cc holds
# one mistake per function, and clang must refuse each of them.
#
#   scripts/thread-safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh >/dev/null
. scripts/ccache.sh
ccache_mark
t0=$SECONDS
build=build-tsa
if [[ ! -f $build/build.ninja ]]; then
  ccache=$(command -v ccache || true)
  CC="${ccache:+$ccache }clang-14" CXX="${ccache:+$ccache }clang++-14" \
    meson setup "$build" -Dtests=false --buildtype=plain \
    -Dcpp_args="-Wthread-safety -ffile-prefix-map=$PWD=."
fi
ninja -C "$build" -j"${TSA_JOBS:-2}"
echo "thread-safety: built with -Wthread-safety -Werror in $((SECONDS - t0)) s ($(ccache_hits))"

# The planted mistakes: clang must refuse every one (3), naming the analysis.
absl_flags=$(pkg-config --cflags absl_base 2>/dev/null || true)
out=$(clang++-14 -std=c++20 -fsyntax-only -Wthread-safety -Werror -I. $absl_flags \
  test/base/thread_safety_violation.cc 2>&1 || true)
caught=$(grep -c 'error: .*\[-Werror,-Wthread-safety' <<<"$out" || true)
if [[ $caught -ne 3 ]]; then
  echo "thread-safety: FAILED: clang refused $caught of the 3 planted mistakes in" \
    "test/base/thread_safety_violation.cc; the analysis no longer checks what it should:" >&2
  echo "$out" >&2
  exit 1
fi
echo "thread-safety: the 3 planted mistakes refused, as they must be"
