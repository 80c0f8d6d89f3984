#!/usr/bin/env bash
# GPU placement on a real GPU machine, with TensorFlow or PyTorch, whichever it has (no network).
#
#   bench/gpu_check.sh            # on the GPU machine, from the repository root (the launcher's
#                                 # dependency wheels on PYTHONPATH or installed)
#   bench/gpu_check.sh --fake     # here: tests/support/nvidia-smi on PATH (FAKE_NVIDIA_SMI_GPUS,
#                                 # default 4; FAKE_NVIDIA_SMI_MIG for MIG); also GPU_CHECK_FAKE=1.
#                                 # The framework sees no GPU then: its checks are SKIP.
#
# It lists the machine's placement units (nvidia-smi -L: each GPU, or each MIG device of a GPU in
# MIG mode) and runs `python3 -m launcher up` on the local backend with a probe as the entrypoint
# (it reports CUDA_VISIBLE_DEVICES, how many GPUs its framework sees, and runs a matmul on each):
#   1. every GPU: one worker per unit, gpus_per_task: 1: each unit to exactly one task, every one busy;
#   2. 2 workers, gpus_per_task auto: equal disjoint shares (TensorFlow's rule), the rest idle;
#   3. 3 workers, the same (fewer units than workers: one each, shared);
#   4. one_device: one GPU, however many the machine has;
#   5. MIG, where a GPU is in MIG mode: one MIG- UUID per task, each a different device;
#   6. with TensorFlow and at least 2 GPUs: two MultiWorkerMirroredStrategy workers (the reference
#      worker) train steps; collective auto must resolve to NCCL in the plan and in the workers, and the
#      report must show both workers' GPU memory;
#   7. gpus_per_task larger than the machine: refused in one line, exit 2, nothing started.
# The launcher itself runs with TensorFlow made unimportable (it must never import it); which of its
# own dependencies each command imported is printed (INFO). PASS/FAIL/SKIP per check; exit 1 on any
# FAIL. Under a minute on a GPU machine, a few seconds (plus TensorFlow's import) with --fake.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
FAKE=${GPU_CHECK_FAKE:-}
[ "${1:-}" = "--fake" ] && FAKE=1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
if [ -n "$FAKE" ]; then
    mkdir -p "$TMP/bin" && ln -s "$ROOT/tests/support/nvidia-smi" "$TMP/bin/nvidia-smi"
    export PATH="$TMP/bin:$PATH" FAKE_NVIDIA_SMI_GPUS="${FAKE_NVIDIA_SMI_GPUS:-4}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
unset CUDA_VISIBLE_DEVICES TF_FORCE_GPU_ALLOW_GROWTH
FAILS=0
RESULTS=""
check() {  # check NAME CONDITION-EXIT-STATUS DETAIL
    if [ "$2" = 0 ]; then RESULTS="$RESULTS\nPASS  $1"; else RESULTS="$RESULTS\nFAIL  $1${3:+: $3}"; FAILS=$((FAILS + 1)); fi
}
skip() { RESULTS="$RESULTS\nSKIP  $1"; }
yes_no() { if "$@"; then echo 0; else echo 1; fi; }

echo "== machine"
echo "python: $($PY --version 2>&1) at $(command -v "$PY")"
echo "\$ nvidia-smi -L"
LIST=$(timeout 20 nvidia-smi -L 2>&1); echo "$LIST"
echo "\$ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader"
timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
# The placement units the launcher sees (gpuquery.parse_list: MIG devices replace their GPU).
UNITS=$($PY -c "
import sys; sys.path.insert(0, 'launcher/remote'); import gpuquery
for u in gpuquery.parse_list(sys.stdin.read()): print(u[0], u[2])" <<< "$LIST")
NUNIT=$(printf '%s\n' "$UNITS" | grep -c .)
NMIG=$(printf '%s\n' "$UNITS" | grep -c ' MIG-')
echo "placement units: $NUNIT ($NMIG MIG devices)"
check "nvidia-smi -L lists a GPU ($NUNIT units)" "$(yes_no [ "$NUNIT" -ge 1 ])"
FW=$($PY - <<'EOF' 2>/dev/null
try:
    import tensorflow as tf  # noqa: F401
    print("tensorflow")
except ImportError:
    try:
        import torch  # noqa: F401
        print("torch")
    except ImportError:
        print("none")
EOF
)
FW=${FW:-none}
echo "framework: $FW"
export GPU_CHECK_FW="$FW"
[ -n "$FAKE" ] && export GPU_CHECK_FW=none  # no GPU for the framework to see: the probes report their env only

# The launcher with TensorFlow made unimportable; which of its other dependencies it imported is
# written down and reported (INFO).
cat > "$TMP/launch.py" <<'EOF'
import atexit
import os
import runpy
import sys

MISSING = {"tensorflow", "torch"}
WATCH = ("pydantic", "fabric", "paramiko", "docker", "jsonschema", "rich", "yaml")


class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MISSING:
            raise ImportError(f"gpu_check: the launcher imported {name}; it must not")
        return None


@atexit.register
def _record():
    with open(os.environ["GPU_CHECK_IMPORTS"], "a") as fh:
        fh.write(" ".join(sys.argv[1:2] + [m for m in WATCH if m in sys.modules]) + "\n")


sys.meta_path.insert(0, Missing())
sys.argv = ["tfcluster"] + sys.argv[1:]
runpy.run_module("launcher", run_name="__main__", alter_sys=True)
EOF
export GPU_CHECK_IMPORTS="$TMP/imports.txt"

# The probe: its CUDA_VISIBLE_DEVICES, how many GPUs its framework sees, a matmul on each; it holds
# them for GPU_CHECK_HOLD s so that every task holds its GPUs at once.
cat > "$TMP/probe.py" <<'EOF'
import os
import time

task = os.environ.get("TFCLUSTER_TASK", "?")
fw = os.environ.get("GPU_CHECK_FW", "none")
print(f"probe {task}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')} "
      f"TF_FORCE_GPU_ALLOW_GROWTH={os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH', 'unset')}", flush=True)
seen = 0
if fw == "tensorflow":
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    for g in gpus:
        tf.config.experimental.set_memory_growth(g, True)
    seen = len(gpus)
    for i in range(seen):
        with tf.device(f"/GPU:{i}"):
            a = tf.random.normal((2048, 2048))
            float(tf.reduce_sum(a @ a))
elif fw == "torch":
    import torch
    seen = torch.cuda.device_count()
    for i in range(seen):
        a = torch.randn(2048, 2048, device=f"cuda:{i}")
        float((a @ a).sum())
        torch.cuda.synchronize(i)
print(f"probe {task}: {fw} sees {seen} GPU(s); a matmul ran on each", flush=True)
time.sleep(float(os.environ.get("GPU_CHECK_HOLD", "6")))
EOF

spec() {  # spec FILE STRATEGY TASKS DEVICES [ENTRYPOINT]
    cat > "$1" <<EOF
name: gpucheck
strategy: $2
backend: local
entrypoint: ${5:-[$PY, probe.py]}
${3:+tasks: $3}
devices: {$4}
watchdog: {startup_timeout: 300}
EOF
}

run_up() {  # run_up NAME SPEC: up, the output in $TMP/NAME.out, the workers' lines in $TMP/NAME.seen
    echo "\$ python3 -m launcher up $(basename "$2")"
    (cd "$TMP" && timeout 600 $PY "$TMP/launch.py" up "$2") > "$TMP/$1.out" 2>&1
    local rc=$?
    cat "$TMP/$1.out"
    cat "$TMP"/runs/gpucheck/latest/logs/*.log 2>/dev/null | grep '^probe ' > "$TMP/$1.seen"
    return $rc
}

# The tasks' CUDA_VISIBLE_DEVICES values (one line each) in $TMP/NAME.seen: disjoint, equal counts.
shares_ok() {  # shares_ok NAME EXPECTED_TASKS [SHARED_OK]
    $PY - "$TMP/$1.seen" "$2" "${3:-}" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
vals = [m.group(1) for m in (re.search(r"CUDA_VISIBLE_DEVICES=(\S+)", l) for l in lines) if m]
sets = [v.split(",") for v in vals]
ok = len(sets) == int(sys.argv[2]) and len({len(s) for s in sets}) == 1
flat = [x for s in sets for x in s]
if not sys.argv[3]:
    ok = ok and len(flat) == len(set(flat))
print(" ".join(vals))
sys.exit(0 if ok else 1)
EOF
}

fw_ok() {  # fw_ok NAME EACH: every probe's framework saw EACH GPUs
    [ "$FW" = none ] || [ -n "$FAKE" ] && return 2
    local n bad
    n=$(grep -c "sees " "$TMP/$1.seen")
    bad=$(grep "sees " "$TMP/$1.seen" | grep -vc "sees $2 GPU")
    [ "$n" -ge 1 ] && [ "$bad" = 0 ]
}

fw_check() {  # fw_check NAME EACH LABEL
    fw_ok "$1" "$2"
    case $? in
        0) check "$3: $FW sees $2 GPU(s) in each task and ran a matmul on each" 0 ;;
        2) skip "$3: framework check ($([ -n "$FAKE" ] && echo "fake nvidia-smi" || echo "no TensorFlow or PyTorch"))" ;;
        *) check "$3: $FW sees $2 GPU(s) in each task" 1 "$(grep 'sees ' "$TMP/$1.seen" | tr '\n' ';')" ;;
    esac
}

if [ "$NUNIT" -ge 1 ]; then
    n=$(( NUNIT > 8 ? 8 : NUNIT ))
    echo; echo "== 1. every GPU: $n workers, gpus_per_task: 1"
    spec "$TMP/every.yaml" multi_worker_mirrored "{worker: $n}" "gpus_per_task: 1"
    GPU_CHECK_HOLD=${GPU_CHECK_HOLD:-12} run_up every "$TMP/every.yaml"
    check "every unit: up exits 0" "$?"
    got=$(shares_ok every "$n"); rc=$?
    check "every unit: $n tasks, one unit each, disjoint ($got)" "$rc"
    fw_check every 1 "every unit"
    # The supervisor's GPU watch against the real nvidia-smi: each task's processes found by pid in
    # --query-compute-apps (the probes hold their memory GPU_CHECK_HOLD s, over two 5 s samples).
    if [ "$FW" != none ] && [ -z "$FAKE" ]; then
        peak=$(grep 'gpu memory peak:' "$TMP/every.out")
        check "every unit: the report shows each task's GPU memory from nvidia-smi (${peak:-no peak line})" \
            "$(yes_no [ "$(printf '%s' "$peak" | grep -oE 'worker:[0-9]+ [1-9][0-9]* MiB' | wc -l)" = "$n" ])"
    fi

    for w in 2 3; do
        echo; echo "== $((w)). $w workers, gpus_per_task: auto"
        spec "$TMP/auto$w.yaml" multi_worker_mirrored "{worker: $w}" "gpus_per_task: auto"
        (cd "$TMP" && timeout 120 $PY "$TMP/launch.py" plan "$TMP/auto$w.yaml") > "$TMP/plan$w.out" 2>&1
        cat "$TMP/plan$w.out"
        run_up "auto$w" "$TMP/auto$w.yaml"
        check "$w workers: up exits 0" "$?"
        if [ "$NUNIT" -ge "$w" ]; then
            each=$(( NUNIT / w )); [ "$NMIG" -gt 0 ] && each=1
            got=$(shares_ok "auto$w" "$w"); rc=$?
            check "$w workers: equal disjoint shares of $each ($got)" "$rc"
            fw_check "auto$w" "$each" "$w workers"
            if [ "$((each * w))" -lt "$NUNIT" ]; then
                grep -q " idle: " "$TMP/plan$w.out"
                check "$w workers: plan says which GPUs idle and why" "$?"
            fi
            if [ "$NMIG" = 0 ]; then
                grep -q "collective nccl (auto: each worker owns its GPUs)" "$TMP/plan$w.out"
                check "$w workers: plan resolves collective auto to nccl" "$?"
            fi
        else
            got=$(shares_ok "auto$w" "$w" shared); rc=$?
            check "$w workers on $NUNIT unit(s): one each, shared ($got)" "$rc"
        fi
    done

    echo; echo "== 4. one_device"
    spec "$TMP/one.yaml" one_device "" "gpus_per_task: auto"
    run_up one "$TMP/one.yaml"
    check "one_device: up exits 0" "$?"
    got=$(shares_ok one 1); rc=$?
    check "one_device: one task with one GPU ($got)" "$(yes_no [ $rc = 0 ] && [ "${got//,/}" = "$got" ])"
    fw_check one 1 "one_device"

    echo; echo "== 5. MIG"
    if [ "$NMIG" -ge 2 ]; then
        spec "$TMP/mig.yaml" multi_worker_mirrored "{worker: 2}" "gpus_per_task: auto"
        run_up mig "$TMP/mig.yaml"
        check "MIG: up exits 0" "$?"
        got=$(shares_ok mig 2); rc=$?
        check "MIG: one MIG- UUID per task, different devices ($got)" \
            "$(yes_no [ $rc = 0 ] && [ "$(grep -c 'CUDA_VISIBLE_DEVICES=MIG-[^,]*$' "$TMP/mig.seen")" = 2 ])"
        fw_check mig 1 "MIG"
    else
        skip "MIG: no GPU in MIG mode here ($NMIG MIG devices)"
    fi

    echo; echo "== 6. two MultiWorkerMirroredStrategy workers over NCCL (the reference worker)"
    if [ "$FW" = tensorflow ] && [ "$NUNIT" -ge 2 ] && [ "$NMIG" = 0 ] && [ -z "$FAKE" ]; then
        spec "$TMP/nccl.yaml" multi_worker_mirrored "{worker: 2}" "gpus_per_task: 1" \
            "$PY -m worker --epochs 1 --steps-per-epoch 200 --batch-size 256"
        (cd "$TMP" && timeout 120 $PY "$TMP/launch.py" plan "$TMP/nccl.yaml") > "$TMP/plannccl.out" 2>&1
        grep -q "collective nccl (auto: each worker owns its GPUs)" "$TMP/plannccl.out"
        check "NCCL: plan resolves collective auto to nccl" "$?"
        GPU_CHECK_HOLD=0 run_up nccl "$TMP/nccl.yaml"
        check "NCCL: two workers trained (up exits 0)" "$?"
        n=$(cat "$TMP"/runs/gpucheck/latest/logs/worker-*.log 2>/dev/null | grep -c "collective implementation=nccl")
        check "NCCL: both workers built MultiWorkerMirroredStrategy with NCCL" "$(yes_no [ "$n" = 2 ])" "$n of 2"
        peak=$(grep 'gpu memory peak:' "$TMP/nccl.out")
        check "NCCL: the report shows both GPUs busy ($peak)" \
            "$(yes_no printf '%s' "$peak" | grep -qE 'worker:0 [1-9][0-9]* MiB.*worker:1 [1-9][0-9]* MiB')"
    else
        skip "NCCL training: needs TensorFlow and >= 2 whole GPUs (framework $FW, $NUNIT units, $NMIG MIG${FAKE:+, fake})"
    fi

    echo; echo "== 7. more GPUs asked for than the machine has: refused"
    spec "$TMP/over.yaml" multi_worker_mirrored "{worker: 2}" "gpus_per_task: $((NUNIT + 1))"
    (cd "$TMP" && timeout 60 $PY "$TMP/launch.py" up "$TMP/over.yaml") > "$TMP/over.out" 2> "$TMP/over.err"
    rc=$?; cat "$TMP/over.out" "$TMP/over.err"
    check "refused with exit 2" "$(yes_no [ "$rc" = 2 ])" "exit $rc"
    check "in one line" "$(yes_no [ "$(grep -c . "$TMP/over.err")" = 1 ])"
fi

while read -r command modules; do
    RESULTS="$RESULTS\nINFO  launcher $command imported: ${modules:-none of the watched modules}"
done < "$TMP/imports.txt" 2>/dev/null

echo
echo "== summary${FAKE:+ (fake nvidia-smi: $FAKE_NVIDIA_SMI_GPUS GPUs${FAKE_NVIDIA_SMI_MIG:+, MIG $FAKE_NVIDIA_SMI_MIG})}, framework $FW"
printf "%b\n" "${RESULTS#\\n}"
if [ "$FAILS" -gt 0 ]; then
    echo "gpu_check: $FAILS check(s) FAILED"
    exit 1
fi
echo "gpu_check: all checks passed"
