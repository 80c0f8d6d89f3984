#!/usr/bin/env bash
# Run the whole test suite on a fresh machine: system packages for the ssh and docker tests
# (as root, Debian), the project with its TensorFlow, test and export extras, then pytest.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m "not integration"`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
    for setup in tests/setup/*.sh; do
        timeout 900 bash "$setup"
    done
else
    echo "tests/run.sh: not root: skipping system setup (the ssh and docker tests will skip)" >&2
fi
timeout 1200 python3 -m pip install --quiet --disable-pip-version-check -e ".[tf,test,export,compare]"
exec python3 -m pytest "$@"
