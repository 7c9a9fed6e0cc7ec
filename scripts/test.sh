#!/usr/bin/env bash
# The whole test suite: unit, integration (in-process fake runtime) and
# end-to-end (the real containerd and runc). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# As root the end-to-end suite must run, not skip.
if [[ $(id -u) -eq 0 ]]; then export CRIHOOK_E2E_REQUIRED=1; fi
meson test -C build --num-processes 2 --print-errorlogs "$@"
