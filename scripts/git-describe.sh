#!/bin/sh
# The commit a build is made from, for base/build_version.cc: base/meson.build's
# vcs_tag runs this in the source tree at every build and takes what it
# prints; when it fails, the commit is "unknown".
#
# What `git describe --always --dirty --abbrev=12` prints, without its lock:
# describe --dirty refreshes the index under .git/index.lock, and a `git add`
# or `git commit` run meanwhile in the same tree (someone committing while a
# build runs) fails on that lock. status with GIT_OPTIONAL_LOCKS=0 compares
# the files' contents without writing the index.
# safe.directory: a tree owned by another user than the builder's (root
# building a developer's clone) is one git otherwise refuses to read.
set -eu
git() { command git -c safe.directory='*' "$@"; }
commit=$(git describe --always --abbrev=12)
changed=$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no)
if [ -n "$changed" ]; then
  commit="$commit-dirty"
fi
# It becomes a C++ string literal: a tag name with a quote or a backslash in
# it is no commit name this build shows (a slash, as in release/0.1, is).
case "$commit" in
  *[!A-Za-z0-9._+/-]*)
    echo "git-describe.sh: git describe gave '$commit', not [A-Za-z0-9._+/-]" >&2
    exit 1
    ;;
esac
printf '%s\n' "$commit"
