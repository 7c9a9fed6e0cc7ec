#!/usr/bin/env bash
# Installs the Debian dependencies and builds crihook into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=release
fi
ninja -C build -j2
