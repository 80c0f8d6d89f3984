#!/usr/bin/env bash
# Run the whole test suite as a new user gets it: system packages for the ssh, docker and slurm tests
# (as root, Debian), then the project with its tf, test, export, compare, ssh, docker and docs extras installed into a
# FRESH virtualenv at the newest versions pyproject.toml's ranges allow, then pytest in that virtualenv.
# The Python that runs this script only creates the virtualenv: its own site-packages play no part
# (a machine's Python may ship packages, or older versions, that a user's virtualenv will not have).
# Pip's wheel cache is reused, so a second run downloads nothing new.
#   TFCLUSTER_TEST_VENV  where the virtualenv goes (default .venv-test in the checkout; made anew each run)
# Extra arguments go to pytest (to every shard, see below), e.g. `bash tests/run.sh -m "not integration"`.
#   TFCLUSTER_TEST_SHARDS=1  one pytest instead of three at once (see below)
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
timeout 1200 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade -e ".[tf,test,export,compare,ssh,docker,docs]"
# The checkout's own modules compiled once, as pip compiles an installed package's (a wheel's
# user has them; an editable install has not): where PYTHONDONTWRITEBYTECODE is set, as this
# machine's environment sets it, each launcher, wrapper, agent and task process would compile
# them again (the `up` path's imports: 0.70 s against 0.46 s, 2026-12-04). Python still checks
# each against its source, so an edit is never run stale.
"$venv/bin/python" -m compileall -q launcher worker tests bench > /dev/null
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
    | grep -iE '^(pytest|tensorflow|tf[-_]keras|pydantic|fabric|paramiko|docker|rich|jsonschema|pyyaml|mkdocs|mkdocs-material) ' \
    | tr -s ' ' | tr '\n' ';' | sed 's/^/tests\/run.sh: in the fresh virtualenv: /; s/;$/\n/' >&2
# shellcheck disable=SC1091
. "$venv/bin/activate"
# Pytests at once (tests/conftest.py, --shard, --queue): by default three, the ssh lab's tests,
# Slurm's and docker's, and the local tests, which every pytest shares out file by file as it
# comes free (tests/support/shardqueue.py; a local file run by none fails the suite): 23 min from
# a fresh clone, the three pytests 20:55 each, CPUs 86 % busy (2026-12-02 18:11, c50f9301).
# TFCLUSTER_TEST_SHARDS=1: one pytest; 2: the labs and the local tests; 3: the labs' tests in one
# pytest, the local tests in two fixed halves beside it (27 min the same day, c50f9301: the labs'
# 25:00 while the halves were done at 19:02 and 14:22, the CPUs 71 % busy); 5: as the default
# with two local pytests. Each output follows the first's.
queue=()
shard_count="${TFCLUSTER_TEST_SHARDS:-4}"
case "$shard_count" in
    1) exec python -m pytest "$@" ;;
    2) shards=(labs local) ;;
    3) shards=(labs local-1 local-2) ;;
    4|5) shards=(labs-1 labs-2 local)
       [ "$shard_count" = 5 ] && shards+=(local)
       queue_dir=$(mktemp -d /tmp/tfcluster-tests-queue.XXXXXX)
       # (one word: a path on its own would be taken for a test path, and pytest would look for
       # its rootdir and conftest.py above it)
       queue=("--queue=$queue_dir") ;;
    *) echo "tests/run.sh: TFCLUSTER_TEST_SHARDS must be 1 to 5, not $shard_count" >&2; exit 2 ;;
esac
# How busy the machine's CPUs were over the shards (from /proc/stat's first line: user nice system
# idle iowait ...): near 100 % the suite's time is its work, well below it the shards wait on
# something (timeouts, sleeps in tasks) and another shard would shorten the run.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $5+$6}' /proc/stat; }
read -r busy_before idle_before < <(cpu_ticks)
# A background job of a script starts with SIGINT ignored, and so does everything this script
# starts when it is itself such a job (a CI runner's, `nohup ... &`); give each pytest back its
# Ctrl-C (the terminal sends it to every shard: one process group).
pytest_with_ctrl_c() {
    python -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable, "-m", "pytest", *sys.argv[1:]])' "$@"
}
# The first shard here; the others beside it, whose output follows. Each shard lists its 30
# slowest tests (and how long it took): where the suite's time goes, in every CI log.
others=("${shards[@]:1}")
# Pytests with --queue: the first runs its shard, then takes local test files; the rest too.
pids=()
logs=()
for shard in "${others[@]}"; do
    log=$(mktemp "/tmp/tfcluster-tests-$shard.XXXXXX")
    pytest_with_ctrl_c --shard "$shard" "${queue[@]}" --durations=30 "$@" > "$log" 2>&1 &
    pids+=($!)
    logs+=("$log")
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM
set +e
pytest_with_ctrl_c --shard "${shards[0]}" "${queue[@]}" --durations=30 "$@"
first=$?
codes=()
for pid in "${pids[@]}"; do
    wait "$pid"
    codes+=($?)
done
set -e
read -r busy_after idle_after < <(cpu_ticks)
for n in "${!others[@]}"; do
    echo "================ tests/run.sh: pytest $((n + 2)), shard ${others[$n]}, run at the same time ================"
    cat "${logs[$n]}"
    rm -f "${logs[$n]}"
done
# Exit 5: no test of that shard was selected (e.g. a path or -k that only another shard has).
all=("$first" "${codes[@]}")
selected=0
for code in "${all[@]}"; do
    [ "$code" != 5 ] && selected=1
done
summary="pytest 1 (${shards[0]}) exit $first"
failed=0
for n in "${!others[@]}"; do
    summary="$summary, pytest $((n + 2)) (${others[$n]}) exit ${codes[$n]}"
done
# Every local test file run by one of them (each stopped before the queue was empty: e.g. -x).
if [ "${#queue[@]}" != 0 ]; then
    python -m tests.support.shardqueue "$queue_dir" || failed=1
    rm -rf "$queue_dir"
fi
for code in "${all[@]}"; do
    if [ "$code" != 0 ] && { [ "$code" != 5 ] || [ "$selected" = 0 ]; }; then
        failed=1
    fi
done
echo "tests/run.sh: the CPUs ($(nproc)) were busy $(( 100 * (busy_after - busy_before) / (busy_after - busy_before + idle_after - idle_before + 1) )) % of the run" >&2
echo "tests/run.sh: $summary" >&2
[ "$failed" = 0 ]
