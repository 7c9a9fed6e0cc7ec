# Sourced by build.sh and fuzz.sh, after install-deps.sh: every
# compile of a run goes through ccache, so a second compile of the same
# source with the same flags (another clone, a second cold build-fuzz) is a
# cache hit. The cache directory is ccache's own (its config, or its default
# under HOME), fixed here as an absolute path: debhelper points HOME at a
# directory of its own inside the package's build (compat 13), which would
# give that build an empty cache (the package test pins it the same way).
# CCACHE_BASEDIR: absolute paths under the tree are hashed relative to it,
# so a clone in another folder shares the cache.
if command -v ccache >/dev/null; then
  CCACHE_DIR=${CCACHE_DIR:-$(ccache -k cache_dir)}
  export CCACHE_DIR
fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}

# ccache_mark, then ccache_hits: "ccache N hits, M misses" for the compiles
# between the two (the machine's: a build beside this one counts too).
# ccache_counts: "HITS MISSES" so far (0 0 without ccache).
ccache_counts() {
  { ccache --print-stats 2>/dev/null || true; } | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hit += $2 }
    $1 == "cache_miss" { miss = $2 }
    END { print hit + 0, miss + 0 }'
}
ccache_mark() { read -r ccache_hit0 ccache_miss0 < <(ccache_counts); }
ccache_hits() {
  command -v ccache >/dev/null || { echo "no ccache"; return; }
  local hit miss
  read -r hit miss < <(ccache_counts)
  echo "ccache $((hit - ${ccache_hit0:-0})) hits, $((miss - ${ccache_miss0:-0})) misses"
}
