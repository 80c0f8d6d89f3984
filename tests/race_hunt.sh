#!/usr/bin/env bash
# The race hunt: the whole suite, N times, on a machine made busy on purpose, each run with its
# wall time and the load average it met; then a summary of which tests failed in which run.
# A loaded 2-core machine opens the windows that a quiet one hides (an offset read after a task
# already wrote, a signal landing inside a library's lock): every failure here is a product bug
# until its cause, in the system's own words (the log line, strace, dmesg), says otherwise.
#   RACE_RUNS  how many suite runs (default 3)
#   RACE_HOGS  CPU hogs, one busy loop each (default: the number of cores)
# The hogs run at nice -5, above the tests (nice 5): the scheduler gives them the CPU first, as a
# busy CI machine's other jobs would. Extra arguments go to tests/run.sh (so to pytest).
# Run as root (the labs), from a checkout: bash tests/race_hunt.sh
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${RACE_RUNS:-3}
hogs=${RACE_HOGS:-$(nproc)}
out=${RACE_OUT:-/tmp/tfcluster-race-hunt}
mkdir -p "$out"
hog_pids=()
stop_hogs() { for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
    nice -n -5 sh -c 'while :; do :; done' &
    hog_pids+=($!)
done
for i in $(seq "$runs"); do
    start=$(date +%s)
    CI=true nice -n 5 bash tests/run.sh "$@" > "$out/run-$i.log" 2>&1
    code=$?
    end=$(date +%s)
    echo "race hunt: run $i of $runs: exit $code, $((end - start)) s, load average at its end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
    grep -E '^(FAILED|ERROR) ' "$out/run-$i.log" | sed "s/^/  run $i: /" | tee -a "$out/summary.txt"
done
echo "race hunt: logs and summary in $out"
