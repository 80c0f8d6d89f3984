#!/usr/bin/env bash
# GPU placement on a real GPU machine: nvidia-smi, CUDA and PyTorch there, no TensorFlow, no network.
#
#   bench/gpu_check.sh            # on the GPU machine, from the repository root (the launcher's
#                                 # dependency wheels unpacked on PYTHONPATH)
#   bench/gpu_check.sh --fake     # here: tests/support/nvidia-smi on PATH (FAKE_NVIDIA_SMI_GPUS, default 1);
#                                 # also GPU_CHECK_FAKE=1. Without torch the probe reports its env only.
#
# It prints nvidia-smi -L and the driver, then runs `python3 -m launcher` on the local backend with a
# PyTorch probe as the entrypoint (it reports CUDA_VISIBLE_DEVICES, torch.cuda.device_count(), the
# device, allocates 1 GiB and does a matmul step):
#   1. plan + up: 2 workers (multi_worker_mirrored) on the 1 GPU, gpus_per_task: auto: shared, with
#      memory growth;
#   2. up with gpus_per_task: 1 and 2 workers: refused in one line, exit 2, nothing started.
# The launcher runs with tensorflow made unimportable (as there); which of its own dependencies
# (pydantic, fabric, paramiko, docker, jsonschema...) each command imported is printed (INFO): those
# must be among the wheels carried there. PASS/FAIL per check; exit 1 on any FAIL.
# A few seconds here; well under a minute on the GPU machine.
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
    export PATH="$TMP/bin:$PATH" FAKE_NVIDIA_SMI_GPUS="${FAKE_NVIDIA_SMI_GPUS:-1}"
    export FAKE_NVIDIA_SMI_APPS_FILE="$TMP/fake-apps"  # the probe writes "pid:MiB" there (no torch here)
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
unset CUDA_VISIBLE_DEVICES TF_FORCE_GPU_ALLOW_GROWTH
FAILS=0
RESULTS=""
check() {  # check NAME CONDITION-EXIT-STATUS DETAIL
    if [ "$2" = 0 ]; then RESULTS="$RESULTS\nPASS  $1"; else RESULTS="$RESULTS\nFAIL  $1${3:+: $3}"; FAILS=$((FAILS + 1)); fi
}

echo "== machine"
echo "python: $($PY --version 2>&1) at $(command -v $PY)"
echo "\$ nvidia-smi -L"
LIST=$(timeout 20 nvidia-smi -L 2>&1); echo "$LIST"
echo "\$ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader"
timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
NGPU=$(printf '%s\n' "$LIST" | grep -c '^GPU [0-9]*: ')
check "nvidia-smi -L lists a GPU ($NGPU)" "$([ "$NGPU" -ge 1 ] && echo 0 || echo 1)"
$PY - <<'EOF' 2>&1 | sed 's/^/torch: /'
try:
    import torch
    print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          "devices", torch.cuda.device_count())
except ImportError:
    print("not installed (the probe reports its environment only)")
EOF

# The launcher with TensorFlow made unimportable (the GPU machine has none: the launcher must never
# import it); which of its other dependencies it imported is written down and reported (INFO).
cat > "$TMP/launch.py" <<'EOF'
import atexit
import os
import runpy
import sys

MISSING = {"tensorflow"}
WATCH = ("pydantic", "fabric", "paramiko", "docker", "jsonschema", "rich", "yaml")


class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MISSING:
            raise ImportError(f"gpu_check: the launcher imported {name}, which the GPU machine does not have")
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

cat > "$TMP/probe.py" <<'EOF'
import os
import sys
import time

task = os.environ.get("TFCLUSTER_TASK", "?")
print(f"probe {task}: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')} "
      f"TF_FORCE_GPU_ALLOW_GROWTH={os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH', 'unset')} "
      f"CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER', 'unset')}", flush=True)
try:
    import torch
except ImportError:
    print(f"probe {task}: torch not installed here: environment only", flush=True)
    if os.environ.get("FAKE_NVIDIA_SMI_APPS_FILE"):  # the fake nvidia-smi lists this process as 1 GiB
        with open(os.environ["FAKE_NVIDIA_SMI_APPS_FILE"], "a") as fh:
            fh.write(f"{os.getpid()}:1024\n")
        print(f"probe {task}: reserved 1024 MiB (fake)", flush=True)
        time.sleep(float(os.environ.get("GPU_CHECK_HOLD", "12")))
    sys.exit(0)
n = torch.cuda.device_count()
name = torch.cuda.get_device_name(0) if n else "none"
print(f"probe {task}: torch {torch.__version__} device_count={n} device={name}", flush=True)
if not n:
    sys.exit(3)
dev = torch.device("cuda:0")
block = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device=dev)  # 1 GiB
a = torch.randn(4096, 4096, device=dev)
torch.cuda.synchronize()
started = time.time()
b = a @ a
torch.cuda.synchronize()
print(f"probe {task}: allocated {torch.cuda.memory_allocated(dev) / 2**30:.2f} GiB; step: 4096x4096 matmul "
      f"{(time.time() - started) * 1000:.1f} ms, sum {float(b.sum()):.4g}", flush=True)
print(f"probe {task}: reserved {torch.cuda.memory_reserved(dev) // 2**20} MiB", flush=True)
# Both tasks hold their memory at once, for longer than two of the launcher's 5-s GPU samples.
time.sleep(float(os.environ.get("GPU_CHECK_HOLD", "12")))
print(f"probe {task}: done", flush=True)
EOF

spec() {  # spec FILE GPUS_PER_TASK
    # More than one GPU here: devices.gpus 1 keeps the run on GPU 0, so the two workers share it.
    local restrict=""
    [ "$NGPU" -gt 1 ] && restrict="gpus: 1, "
    cat > "$1" <<EOF
name: gpucheck
strategy: multi_worker_mirrored
backend: local
entrypoint: [$PY, probe.py]
tasks: {worker: 2}
devices: {${restrict}gpus_per_task: $2}
watchdog: {startup_timeout: 120}
EOF
}

echo
echo "== 1. two workers on one GPU, gpus_per_task: auto"
spec "$TMP/auto.yaml" auto
cat "$TMP/auto.yaml"
echo "\$ python3 -m launcher plan auto.yaml"
timeout 60 $PY "$TMP/launch.py" plan "$TMP/auto.yaml" > "$TMP/plan.out" 2>&1
rc=$?; cat "$TMP/plan.out"
check "plan exits 0" "$rc" "exit $rc"
rows=$(grep -cE '^  worker:[01] +localhost +gpu 0 shared ' "$TMP/plan.out")
check "plan: both workers 'gpu 0 shared'" "$([ "$rows" = 2 ] && echo 0 || echo 1)" "$rows of 2 rows"
grep -q '^  TF_FORCE_GPU_ALLOW_GROWTH=true$' "$TMP/plan.out"
check "plan: memory growth (TF_FORCE_GPU_ALLOW_GROWTH=true) for the shared GPU" "$?"
echo "\$ python3 -m launcher up auto.yaml"
started=$(date +%s)
RAW="${GPU_CHECK_RAW:-$TMP/raw-nvidia-smi.txt}"  # what the real tool printed, to hold the fake against
( for i in 1 2 3 4 5 6; do
    sleep 2
    for q in "-L" "--query-compute-apps=pid,used_memory --format=csv,noheader,nounits" \
             "--query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"; do
        echo "\$ nvidia-smi $q  (t+$((i * 2)) s)"; timeout 10 nvidia-smi $q 2>&1; echo "(exit $?)"
    done
  done > "$RAW" ) &
rawpid=$!
timeout 180 $PY "$TMP/launch.py" up "$TMP/auto.yaml" > "$TMP/up.out" 2>&1
rc=$?; cat "$TMP/up.out"
wait "$rawpid" 2>/dev/null
echo "-- nvidia-smi while the probes ran (the formats the launcher parses):"; head -40 "$RAW"
echo "(up took $(( $(date +%s) - started )) s)"
check "up exits 0" "$rc" "exit $rc"
for w in 0 1; do
    log="$TMP/runs/gpucheck/latest/logs/worker-$w.log"
    grep -q "CUDA_VISIBLE_DEVICES=0 TF_FORCE_GPU_ALLOW_GROWTH=true CUDA_DEVICE_ORDER=PCI_BUS_ID" "$log" 2>/dev/null
    check "worker:$w sees CUDA_VISIBLE_DEVICES=0 with memory growth" "$?"
    if grep -q "torch not installed" "$log" 2>/dev/null; then
        RESULTS="$RESULTS\nSKIP  worker:$w torch step (no torch here)"
    else
        grep -q "device_count=1 " "$log" 2>/dev/null
        check "worker:$w: torch sees exactly 1 GPU" "$?"
        grep -qE "allocated 1\.[0-9]+ GiB; step:" "$log" 2>/dev/null
        check "worker:$w allocated 1 GiB and ran a step" "$?"
    fi
done

# The launcher's GPU figures (nvidia-smi's compute apps matched to each task's processes) against
# the probe's own count (torch's reserved memory; the CUDA context adds a few hundred MiB more).
peakline=$(grep 'gpu memory peak:' "$TMP/up.out")
for w in 0 1; do
    log="$TMP/runs/gpucheck/latest/logs/worker-$w.log"
    own=$(sed -n 's/.*reserved \([0-9]*\) MiB.*/\1/p' "$log" 2>/dev/null | head -1)
    peak=$(printf '%s\n' "$peakline" | sed -n "s/.*worker:$w \([0-9]*\) MiB.*/\1/p")
    check "worker:$w GPU memory peak in the report (${peak:-none} MiB) >= its own reserved ${own:-?} MiB and < +3 GiB" \
        "$([ -n "$peak" ] && [ -n "$own" ] && [ "$peak" -ge "$own" ] && [ "$peak" -lt $((own + 3072)) ] && echo 0 || echo 1)"
done

echo
echo "== 2. two workers, gpus_per_task: 1, on one GPU: refused"
spec "$TMP/one.yaml" 1
echo "\$ python3 -m launcher up one.yaml"
timeout 60 $PY "$TMP/launch.py" up "$TMP/one.yaml" > "$TMP/one.out" 2> "$TMP/one.err"
rc=$?; cat "$TMP/one.out" "$TMP/one.err"
check "refused with exit 2" "$([ "$rc" = 2 ] && echo 0 || echo 1)" "exit $rc"
lines=$(grep -c . "$TMP/one.err")
grep -q "localhost has 1 GPU.*2 tasks x gpus_per_task 1 need 2" "$TMP/one.err"
check "one line naming the host and the counts" "$([ $? = 0 ] && [ "$lines" = 1 ] && echo 0 || echo 1)" "$lines lines"
runs=$(ls "$TMP/runs/gpucheck" 2>/dev/null | grep -c '^[0-9]\{8\}-')
check "nothing started (still one run record)" "$([ "$runs" = 1 ] && echo 0 || echo 1)" "$runs run records"

while read -r command modules; do
    RESULTS="$RESULTS\nINFO  launcher $command imported: ${modules:-none of the watched modules}"
done < "$TMP/imports.txt"

echo
echo "== summary${FAKE:+ (fake nvidia-smi: $FAKE_NVIDIA_SMI_GPUS GPU)}"
printf "%b\n" "${RESULTS#\\n}"
if [ "$FAILS" -gt 0 ]; then
    echo "gpu_check: $FAILS check(s) FAILED"
    exit 1
fi
echo "gpu_check: all checks passed"
