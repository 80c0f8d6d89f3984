#!/usr/bin/env bash
# Run the whole test suite as a new user gets it: system packages for the ssh, docker and slurm tests
# (as root, Debian), then the project with its tf, test, export and compare extras installed into a
# FRESH virtualenv at the newest versions pyproject.toml's ranges allow, then pytest in that virtualenv.
# The Python that runs this script only creates the virtualenv: its own site-packages play no part
# (a machine's Python may ship packages, or older versions, that a user's virtualenv will not have).
# Pip's wheel cache is reused, so a second run downloads nothing new.
#   TFCLUSTER_TEST_VENV  where the virtualenv goes (default .venv-test in the checkout; made anew each run)
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
venv="${TFCLUSTER_TEST_VENV:-$PWD/.venv-test}"
base_python=$(command -v python3)
rm -rf "$venv"
"$base_python" -m venv "$venv"
# Newest versions within the ranges: a fresh virtualenv has nothing to keep, and --upgrade says so.
timeout 1200 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade -e ".[tf,test,export,compare]"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
    | grep -iE '^(pytest|tensorflow|tf[-_]keras|pydantic|fabric|paramiko|docker|rich|jsonschema|pyyaml) ' \
    | tr -s ' ' | tr '\n' ';' | sed 's/^/tests\/run.sh: in the fresh virtualenv: /; s/;$/\n/' >&2
# shellcheck disable=SC1091
. "$venv/bin/activate"
exec python -m pytest "$@"
