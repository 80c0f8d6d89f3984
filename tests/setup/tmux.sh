#!/bin/sh
# tmux: the console tests drive `tfcluster up` in a real terminal (tests/integration/test_console.py).
# Idempotent; run as root on Debian/Ubuntu.
set -eu

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/setup/tmux.sh: run as root (it installs packages)" >&2
    exit 1
fi
if ! command -v tmux >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -qq
    timeout 600 apt-get install -y -qq --no-install-recommends tmux
fi
