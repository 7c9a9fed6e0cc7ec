# Sourced by build.sh, fuzz.sh and test.sh: where every compile of a run
# caches its objects, so that a second compile of the same source with the
# same flags (another clone, the Debian package's build, a second cold
# build-fuzz) is a cache hit. Set here, not left to ccache, because
# debhelper points HOME at a directory of its own inside the package's build
# (compat 13), which would give that build an empty cache of its own.
# CCACHE_BASEDIR: absolute paths under the tree are hashed relative to it,
# so a clone in another folder shares the cache.
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/ccache}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
# Three builds of the project fit: the suite's (-O3), the package's (-O2 -g)
# and the fuzzing harnesses' (ASan, UBSan): about 1, 2 and 2 GiB.
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
unset home

# ccache_mark, then ccache_hits: "ccache N hits, M misses" for the compiles
# between the two.
ccache_stat() { ccache --print-stats 2>/dev/null | awk -v k="$1" '$1 == k { n = $2 } END { print n + 0 }'; }
ccache_mark() {
  ccache_hit0=$(($(ccache_stat direct_cache_hit) + $(ccache_stat preprocessed_cache_hit)))
  ccache_miss0=$(ccache_stat cache_miss)
}
ccache_hits() {
  command -v ccache >/dev/null || { echo "no ccache"; return; }
  local hit=$(($(ccache_stat direct_cache_hit) + $(ccache_stat preprocessed_cache_hit)))
  local miss; miss=$(ccache_stat cache_miss)
  echo "ccache $((hit - ${ccache_hit0:-0})) hits, $((miss - ${ccache_miss0:-0})) misses"
}
