#!/usr/bin/env bash
# Debian unstable (sid)'s containerd 2.x into CACHE_DIR (containerd-debian.sh);
# prints its containerd binary's path.
# Usage: containerd2.sh CACHE_DIR
exec "$(dirname "$0")/containerd-debian.sh" sid 2 "$1"
