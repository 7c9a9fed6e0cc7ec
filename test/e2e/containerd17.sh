#!/usr/bin/env bash
# Debian 13 (trixie)'s containerd 1.7 into CACHE_DIR (containerd-debian.sh);
# prints its containerd binary's path.
# Usage: containerd17.sh CACHE_DIR
exec "$(dirname "$0")/containerd-debian.sh" trixie 1.7 "$1"
