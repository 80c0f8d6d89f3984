"""GPUs on ``backend: slurm`` against the lab's real Slurm 22.05, whose nodes declare 2 fake GPUs
each (tests/labs/slurm.py: GresTypes=gpu, Gres=gpu:tfake:2, gres.conf File= device nodes): the job
asks for them, each GPU task's step asks for its own, and **Slurm** sets CUDA_VISIBLE_DEVICES
(SLURM_STEP_GPUS is set only by slurmd's gres plugin, so a value tfcluster wrote itself would
show without it). Every task records its environment from inside its step."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.waits import wait_for

from tests.labs.slurm import GPU_TYPE

from .conftest import PY, tfcluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(300)]

# argv: the directory to record into, how many tasks, "all" (every task exits once all have
# recorded) or "chief" (only the chief does; the others wait to be stopped, as PSS servers do).
PROBE = (
    "import json,os,sys,time\n"
    "d,n,mode=sys.argv[1],int(sys.argv[2]),sys.argv[3];k=os.environ['TFCLUSTER_TASK']\n"
    "keys=('CUDA_VISIBLE_DEVICES','SLURM_STEP_GPUS','SLURMD_NODENAME','TFCLUSTER_GPUS','TF_FORCE_GPU_ALLOW_GROWTH',"
    "'TF_NUM_INTRAOP_THREADS','SLURM_CPUS_ON_NODE','SLURM_CPUS_PER_TASK')\n"
    "p=os.path.join(d,k.replace(':','-'));open(p+'.tmp','w').write(json.dumps({x:os.environ.get(x) for x in keys}))\n"
    "os.rename(p+'.tmp',p+'.json');end=time.time()+120\n"
    "if mode=='all' or k.startswith('chief'):\n"
    "    while len([f for f in os.listdir(d) if f.endswith('.json')])<n and time.time()<end: time.sleep(0.2)\n"
    "    sys.exit(0)\n"
    "time.sleep(300)\n"
)


def _seen(where: Path) -> dict[str, dict]:
    return {p.stem.replace("-", ":"): json.loads(p.read_text()) for p in where.glob("*.json")}


def _run(lab, make_spec, tmp_path, tasks, mode, **extra):
    where = tmp_path / "seen"
    where.mkdir()
    count = sum(tasks.values())
    spec = make_spec([PY, "-c", PROBE, str(where), str(count), mode], tasks=tasks, **extra)
    proc = tfcluster(lab, "up", str(spec), timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = _seen(where)
    assert len(seen) == count, seen
    return spec, seen, proc


def _no_leftovers(lab, spec):
    job = json.loads((spec.parent / "runs" / "slurmtest" / "latest" / "slurm.json").read_text())["job_id"]
    wait_for(lambda: job not in lab.jobs(), 30, what=f"slurm job {job} to end")


def test_gpus_per_task_one_slurm_gives_tasks_on_a_node_disjoint_gpus(lab, make_spec, tmp_path):
    spec, seen, _ = _run(lab, make_spec, tmp_path, {"worker": 4}, "all",
                         slurm={"tasks_per_node": 2}, devices={"gpus_per_task": 1})
    by_node: dict[str, list[str]] = {}
    for key, env in seen.items():
        # Slurm granted it (SLURM_STEP_GPUS) and set CUDA_VISIBLE_DEVICES to it; the request
        # marker tfcluster uses elsewhere never reaches the task.
        assert env["SLURM_STEP_GPUS"] is not None and env["CUDA_VISIBLE_DEVICES"] == env["SLURM_STEP_GPUS"], (key, env)
        assert env["TFCLUSTER_GPUS"] is None, env
        # Its own share of the node's CPUs (the lab's 4 / 2 tasks: the job asked --cpus-per-task=2,
        # the step --exact -c 2): its thread budget is made from them, more than one CPU.
        assert env["SLURM_CPUS_PER_TASK"] == "2" and env["SLURM_CPUS_ON_NODE"] == "2", env
        assert env["TF_NUM_INTRAOP_THREADS"] == "2", env
        by_node.setdefault(env["SLURMD_NODENAME"], []).append(env["CUDA_VISIBLE_DEVICES"])
    assert sorted(by_node) == ["n1", "n2"], seen
    for node, devices in by_node.items():
        assert sorted(devices) == ["0", "1"], (node, seen)  # one GPU each, not the same one
    _no_leftovers(lab, spec)


def test_parameter_server_ps_and_chief_get_none_and_workers_divide_their_nodes_gpus(lab, make_spec, tmp_path):
    # 4 tasks, 2 per node, in plan order: chief and worker:0 on one node, worker:1 and ps:0 on
    # the other; gpus_per_task auto: each worker is its node's only GPU task and gets both GPUs.
    spec, seen, proc = _run(lab, make_spec, tmp_path, {"chief": 1, "worker": 2, "ps": 1}, "chief",
                            strategy="parameter_server", slurm={"tasks_per_node": 2})
    plan = json.loads((spec.parent / "runs" / "slurmtest" / "latest" / "plan.json").read_text())
    node_of = {f"{t['type']}:{t['index']}": t["host"] for t in plan["tasks"]}
    for key in ("chief:0", "ps:0"):
        assert seen[key]["CUDA_VISIBLE_DEVICES"] == "-1" and seen[key]["SLURM_STEP_GPUS"] is None, (key, seen[key])
    workers = {k: v for k, v in seen.items() if k.startswith("worker:")}
    for key, env in workers.items():
        alone = [k for k in workers if node_of[k] == node_of[key]] == [key]
        assert env["SLURM_STEP_GPUS"] is not None and env["CUDA_VISIBLE_DEVICES"] == env["SLURM_STEP_GPUS"], env
        if alone:
            assert env["CUDA_VISIBLE_DEVICES"] == "0,1", (key, env, node_of)
    shared_nodes = {node_of[k] for k in workers}
    if len(shared_nodes) == 1:  # both workers on one node: one GPU each
        assert sorted(env["CUDA_VISIBLE_DEVICES"] for env in workers.values()) == ["0", "1"], seen
    assert "Traceback" not in proc.stderr
    _no_leftovers(lab, spec)


def test_more_gpus_per_node_than_the_partition_has_fails_in_preflight_in_one_line(lab, make_spec):
    spec = make_spec([PY, "-c", "pass"], tasks={"worker": 2}, slurm={"tasks_per_node": 2},
                     devices={"gpus_per_task": 2})
    proc = tfcluster(lab, "up", str(spec))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "tfcluster: error: slurm: partition 'debug' has 0 node(s) with 4 GPUs, the run needs 1 (2 task(s) x 2 "
        "GPU(s) per node; GPUs per node: n1 2, n2 2, n3 2); lower devices.gpus_per_task or slurm.tasks_per_node, or "
        "choose a GPU partition (slurm.partition)"], proc.stderr
    assert lab.jobs() == []


def test_the_slurm_facts_gpu_steps_rely_on(lab):
    """Slurm 22.05 with the lab's gres: two running ``--exact --gpus-per-task=1`` steps on one
    node get different GPUs, two ``--overlap`` ones the same (why GPU steps are not overlap),
    and a ``--gres=none`` step has CUDA_VISIBLE_DEVICES unset even when exported (why a CPU
    step's shell sets -1 itself)."""
    job = lab.run("sbatch", "--parsable", "-N1", "--ntasks-per-node=2", "--gres=gpu:2", "-o", "/dev/null",
                  "--wrap", "exec sleep 120").stdout.strip()
    wait_for(lambda: lab.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING", 30,
             what="the job to run")
    show = 'echo "[${CUDA_VISIBLE_DEVICES-unset}]"; sleep 3'

    env = {**os.environ, **lab.env(), "CUDA_VISIBLE_DEVICES": "-1"}

    def two(*opts):
        procs = [subprocess.Popen(["srun", f"--jobid={job}", "--ntasks=1", *opts, "sh", "-c", show],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
                 for _ in range(2)]
        return sorted(p.communicate(timeout=60)[0].strip() for p in procs)

    assert two("--exact", "--cpus-per-task=1", "--gpus-per-task=1") == ["[0]", "[1]"]
    assert two("--overlap", "--gpus-per-task=1") == ["[0]", "[0]"]
    out = subprocess.run(["srun", f"--jobid={job}", "--ntasks=1", "--overlap", "--gres=none", "--export=ALL",
                          "sh", "-c", 'echo "[${CUDA_VISIBLE_DEVICES-unset}]"'], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.stdout.strip() == "[unset]", out.stderr
    lab.run("scancel", job, check=False)


def test_slurm_cpus_per_task_gives_each_gpu_step_that_many_cpus(lab, make_spec, tmp_path):
    spec, seen, _ = _run(lab, make_spec, tmp_path, {"worker": 2}, "all",
                         slurm={"tasks_per_node": 2, "cpus_per_task": 1}, devices={"gpus_per_task": 1})
    assert {env["SLURM_CPUS_PER_TASK"] for env in seen.values()} == {"1"}, seen
    _no_leftovers(lab, spec)


def test_a_typed_gres_in_sbatch_makes_the_steps_ask_typed_and_they_get_their_gpus(lab, make_spec, tmp_path):
    # Slurm 23 refuses an untyped step request in a job whose GPUs were asked typed ("Step
    # requested GRES (gpu:(null)) not found in the job"); the steps name the type too.
    spec, seen, _ = _run(lab, make_spec, tmp_path, {"worker": 2}, "all",
                         slurm={"tasks_per_node": 2, "sbatch": [f"--gres=gpu:{GPU_TYPE}:2"]})
    assert sorted(env["CUDA_VISIBLE_DEVICES"] for env in seen.values()) == ["0", "1"], seen
    assert all(env["SLURM_STEP_GPUS"] == env["CUDA_VISIBLE_DEVICES"] for env in seen.values()), seen
    plan = tfcluster(lab, "plan", "--json", str(spec))
    launch = json.loads(plan.stdout)["launch"]
    assert f"--gres=gpu:{GPU_TYPE}:2" in launch["allocation"], launch
    assert all(f"--gpus-per-task={GPU_TYPE}:1" in argv for argv in launch["tasks"].values()), launch
    _no_leftovers(lab, spec)


def test_shared_auto_spreads_tasks_over_the_gpus_as_local_does(lab, make_spec, tmp_path):
    # Three auto tasks on a node of 2 GPUs: local gives 0, 1, 0; Slurm would show each both.
    spec, seen, _ = _run(lab, make_spec, tmp_path, {"worker": 3}, "all", slurm={"tasks_per_node": 3},
                         collective={"implementation": "ring"})
    assert sorted(env["CUDA_VISIBLE_DEVICES"] for env in seen.values()) == ["0", "0", "1"], seen
    assert seen["worker:1"]["CUDA_VISIBLE_DEVICES"] == "1", seen
    assert all(env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for env in seen.values()), seen  # shared: growth
    _no_leftovers(lab, spec)


def test_plan_shows_the_sbatch_line_and_each_steps_srun_line(lab, make_spec):
    spec = make_spec([PY, "-c", "pass"], tasks={"worker": 4}, slurm={"tasks_per_node": 2},
                     devices={"gpus_per_task": 1})
    text = tfcluster(lab, "plan", str(spec))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    at = lines.index(next(ln for ln in lines if ln.startswith("commands on backend slurm")))
    allocation = lines[at + 1]
    assert allocation.startswith("  allocation: sbatch --parsable "), allocation
    # The lab's nodes: 4 CPUs, 2 fake GPUs; 2 tasks a node: 2 CPUs and one GPU each.
    for part in ("--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=2", "--gres=gpu:2", "--partition=debug"):
        assert part in allocation.split(), allocation
    steps = lines[at + 2:at + 6]
    assert [ln.split(":")[0].strip() + ":" + ln.split(":")[1] for ln in steps] == [
        "worker:0", "worker:1", "worker:2", "worker:3"], steps
    for ln in steps:
        assert " srun --jobid=JOB " in ln and "--exact --cpus-per-task=2 --gpus-per-task=1" in ln, ln
    data = json.loads(tfcluster(lab, "plan", "--json", str(spec)).stdout)["launch"]
    assert data["allocation"][0] == "sbatch" and "--cpus-per-task=2" in data["allocation"]
    assert sorted(data["tasks"]) == ["worker:0", "worker:1", "worker:2", "worker:3"]
    assert lab.jobs() == []  # plan submits nothing
