#!/usr/bin/env bash
# The race hunt: the whole suite, N times, on a machine made busy on purpose, each run with its
# wall time and the load average it met; then a summary of which tests failed in which run.
# A loaded 2-core machine opens the windows that a quiet one hides (an offset read after a task
# already wrote, a signal landing inside a library's lock): every failure here is a product bug
# until its cause, in the system's own words (the log line, strace, dmesg), says otherwise.
#
# Each run is `CI=true bash tests/run.sh` in its own fresh clone of this checkout's HEAD (commit
# first: what is not committed is not hunted), with its own fresh virtualenv.
#   RACE_RUNS      how many suite runs (default 3)
#   RACE_PARALLEL  how many of them at once (default 1); each is then load for the others, and
#                  gets its own ssh and Slurm lab (prefix, subnet, port); the docker tests of one
#                  wait for another's private engine (one per machine)
#   RACE_HOGS      CPU hogs, one busy loop each (default: the number of cores)
#   RACE_HOG_NICE  the hogs' nice (default 0); RACE_TEST_NICE the suites' (default 5): the hogs
#                  get the CPU first, as a busy CI machine's other jobs would
#   RACE_OUT       where the clones, logs and summary go (default /tmp/tfcluster-race-hunt)
# The hogs start once every run at hand has installed its virtualenv (tests/run.sh's "in the fresh
# virtualenv" line): a pip install starved for 20 minutes fails on its timeout and hunts nothing.
# Nice works among the processes of one session (the kernel's autogroups): the runs stay in this
# script's session with the hogs; the lab hosts' tasks, started by their sshd in sessions of their
# own, meet that session as groups of equal weight.
# Extra arguments go to tests/run.sh (so to pytest). Run as root (the labs): bash tests/race_hunt.sh
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${RACE_RUNS:-3}
parallel=${RACE_PARALLEL:-1}
hogs=${RACE_HOGS:-$(nproc)}
hog_nice=${RACE_HOG_NICE:-0}
test_nice=${RACE_TEST_NICE:-5}
out=${RACE_OUT:-/tmp/tfcluster-race-hunt}
mkdir -p "$out"
hog_pids=()
run_pids=()
start_hogs() {
    [ "${#hog_pids[@]}" -gt 0 ] && return
    for _ in $(seq "$hogs"); do
        nice -n "$hog_nice" sh -c 'while :; do :; done' &
        hog_pids+=($!)
    done
    echo "race hunt: $hogs hog(s) at nice $hog_nice from $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
}
stop_hogs() {
    for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null; done
    hog_pids=()
}
stop_all() {
    stop_hogs
    kill "$sampler" 2>/dev/null
    for p in "${run_pids[@]}"; do pkill -TERM -P "$p" 2>/dev/null; done  # tests/run.sh passes it on
}
trap stop_all EXIT
# The load the runs met, a line a minute, beside the summary.
(while :; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 60; done) >> "$out/load.txt" &
sampler=$!
# Wait (at most 30 min) until run $1's log says its virtualenv is installed, or the run has ended.
wait_installed() {
    local i=$1 pid=$2 end=$((SECONDS + 1800))
    until grep -q "in the fresh virtualenv" "$out/run-$i.log" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "race hunt: run $i ended before its virtualenv was installed (see $out/run-$i.log)" | tee -a "$out/summary.txt"
            return
        fi
        if [ "$SECONDS" -ge "$end" ]; then
            echo "race hunt: run $i installed no virtualenv in 30 min (see $out/run-$i.log)" | tee -a "$out/summary.txt"
            return
        fi
        sleep 2
    done
}
i=0
while [ "$i" -lt "$runs" ]; do
    batch=()
    declare -A began=()
    for _ in $(seq "$parallel"); do
        [ "$i" -ge "$runs" ] && break
        i=$((i + 1))
        rm -rf "$out/clone-$i" "$out/run-$i.end"
        git clone -q . "$out/clone-$i"
        env=(CI=true TFCLUSTER_TEST_VENV="$out/venv-$i")
        if [ "$parallel" -gt 1 ]; then
            # Labs of their own (tests/labs/ssh.py, slurm.py), and a docker wait as long as a suite.
            env+=(TFCLUSTER_LAB_PREFIX="rh${i}s" TFCLUSTER_LAB_SUBNET="10.$((200 + i)).1"
                  TFCLUSTER_SLURM_PREFIX="rh${i}l" TFCLUSTER_SLURM_SUBNET="10.$((200 + i)).2"
                  TFCLUSTER_SLURM_PORT=$((7000 + 10 * i)) TFCLUSTER_TEST_DOCKER_WAIT_S=10800)
        fi
        began[$i]=$(date +%s)
        # In this script's session: nice orders processes only within one session (the kernel's
        # autogroup), so the runs and the hogs share one, and the hogs' lower nice counts.
        # Each run notes its own end: the summary waits for the runs in order, so a run that
        # ended before the one waited for would otherwise be timed to that one's end.
        (cd "$out/clone-$i" && env "${env[@]}" nice -n "$test_nice" bash tests/run.sh "$@"
         code=$?; date +%s > "$out/run-$i.end"; exit "$code") > "$out/run-$i.log" 2>&1 &
        run_pids+=($!)
        batch+=("$i:$!")
        echo "race hunt: run $i of $runs started at $(date -u +%T) in $out/clone-$i" | tee -a "$out/summary.txt"
        # One at a time through the system setup and pip (apt and dpkg take one at a time).
        wait_installed "$i" "$!"
    done
    start_hogs
    for entry in "${batch[@]}"; do
        n=${entry%%:*}
        pid=${entry#*:}
        wait "$pid"
        code=$?
        end=$(cat "$out/run-$n.end" 2>/dev/null || date +%s)
        echo "race hunt: run $n of $runs: exit $code, $((end - ${began[$n]})) s, ended $(date -u -d "@$end" +%T)" | tee -a "$out/summary.txt"
        grep -E '^(FAILED|ERROR) ' "$out/run-$n.log" | sed "s/^/  run $n: /" | tee -a "$out/summary.txt"
        grep -E '^[=]+ .*(passed|failed|error).* in ' "$out/run-$n.log" | sed "s/^/  run $n: /" | tee -a "$out/summary.txt"
        awk -v a="$(date -u -d "@${began[$n]}" +%T)" -v b="$(date -u -d "@$end" +%T)" -v n="$n" \
            '$1 >= a && $1 <= b { if (!c++ || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
             END { if (c) printf "  run %s: load %s to %s (the 1-minute average, sampled each minute)\n", n, lo, hi }' \
            "$out/load.txt" | tee -a "$out/summary.txt"
    done
    stop_hogs
    unset began
done
echo "race hunt: logs and summary in $out"
