"""GPUs on ``backend: slurm`` (launcher/backends/slurm/gpus.py): what sinfo's Gres says, what the
job and each step ask Slurm for, and the partition check's one line. Pure; the lab test
(tests/integration/slurm/test_slurm_gpus.py) shows Slurm doing it."""

from __future__ import annotations

import pytest

from launcher.backends.slurm import gpus
from launcher.backends.slurm.gpus import CPU_STEP, Step


def test_gres_strings_as_sinfo_prints_them():
    assert gpus.gres_gpus("gpu:2") == 2
    assert gpus.gres_gpus("gpu:a100:4(S:0-1)") == 4
    assert gpus.gres_gpus("gpu:a100:4(S:0-1),mps:400") == 4
    assert gpus.gres_gpus("gpu:tesla:1,gpu:k80:2") == 3
    assert gpus.gres_gpus("mps:100") == 0
    assert gpus.gres_gpus("(null)") == 0
    assert gpus.gres_gpus("") == 0


def test_sinfo_node_lines_count_each_node_once():
    text = "n1|gpu:2\nn1|gpu:2\nn2|(null)\nn3|gpu:v100:4(S:0)\n"
    assert gpus.parse_nodes(text) == {"n1": (2, 0), "n2": (0, 0), "n3": (4, 0)}


def test_fixed_counts_get_exclusive_steps_with_their_share_of_cpus():
    takes = {"worker:0": 1, "worker:1": 1, "ps:0": 0}
    nodes = {"worker:0": "n1", "worker:1": "n1", "ps:0": "n2"}
    assert gpus.job_gpus({"n1": [1, 1], "n2": [0]}, [2, 2]) == 2
    out = gpus.steps(takes, nodes, per_node=2, cpus_per_node=4)
    assert out["worker:0"] == Step(srun=("--exact", "--cpus-per-task=2", "--gpus-per-task=1"), gpus=1)
    assert out["worker:0"].exclusive and "--overlap" not in out["worker:0"].srun
    # The ps: no GPU request, and the -1 Slurm would otherwise unset.
    assert out["ps:0"] is CPU_STEP
    assert out["ps:0"].srun == ("--overlap", "--gres=none")
    assert "CUDA_VISIBLE_DEVICES=-1" in out["ps:0"].shell


def test_auto_divides_a_nodes_gpus_and_shares_when_there_are_more_tasks():
    nodes = {f"worker:{i}": "n1" for i in range(2)}
    out = gpus.steps({k: "auto" for k in nodes}, nodes, per_node=4, cpus_per_node=2)
    assert [o.gpus for o in out.values()] == [2, 2]
    assert all("--gpus-per-task=2" in o.srun and not o.shared for o in out.values())
    nodes = {f"worker:{i}": "n1" for i in range(3)}
    out = gpus.steps({k: "auto" for k in nodes}, nodes, per_node=2, cpus_per_node=3)
    assert all(o.shared and o.srun == ("--overlap", "--gres=gpu:2") for o in out.values())
    # Alone on its node: all of them.
    out = gpus.steps({"worker:0": "auto"}, {"worker:0": "n1"}, per_node=2, cpus_per_node=1)
    assert out["worker:0"].srun[-1] == "--gpus-per-task=2" and not out["worker:0"].shared


def test_all_sees_the_jobs_gpus_and_auto_asks_for_the_smallest_gpu_node():
    out = gpus.steps({"worker:0": "all", "worker:1": "all"}, {"worker:0": "n1", "worker:1": "n1"}, 2, 2)
    assert all(o.srun == ("--overlap", "--gres=gpu:2") and o.shared for o in out.values())
    assert gpus.job_gpus({"n1": ["auto"]}, [0, 8, 4]) == 4
    assert gpus.job_gpus({"n1": ["auto", 3]}, [2, 2]) == 3
    assert gpus.job_gpus({"n1": ["auto"]}, [0, 0]) == 0


def test_no_gpus_in_the_job_leaves_steps_as_they_were():
    out = gpus.steps({"worker:0": "auto", "ps:0": 0}, {"worker:0": "n1", "ps:0": "n1"}, 0, 2)
    assert out["worker:0"].srun == () and out["worker:0"].shell == ""
    assert out["ps:0"].srun == () and "=-1" in out["ps:0"].shell


def test_partition_with_too_few_gpus_is_one_line_naming_counts_and_fix():
    nodes = {"n1": 2, "n2": 2, "n3": 0}
    assert gpus.check_partition("debug", nodes, {"node1": [1, 1], "node2": [1]}, 2, "devices.gpus_per_task") is None
    msg = gpus.check_partition("debug", nodes, {"node1": [2, 2]}, 1, "devices.gpus_per_task")
    assert msg is not None and "\n" not in msg
    assert "partition 'debug' has 0 node(s) with 4 GPUs" in msg
    assert "2 task(s) x 2 GPU(s) per node" in msg and "n1 2, n2 2, n3 0" in msg
    assert "devices.gpus_per_task" in msg and "slurm.partition" in msg
    # Enough GPU nodes for one node's need but not for three.
    msg = gpus.check_partition("debug", nodes, {"a": [1], "b": [1], "c": [1]}, 3, "devices.gpus_per_task")
    assert "has 2 node(s) with 1 GPUs, the run needs 3" in msg
    # auto/all require nothing.
    assert gpus.check_partition("cpu", {"c1": 0}, {"a": ["auto", "all"]}, 1, "x") is None


def test_devices_gpus_count_caps_what_auto_tasks_ask_for():
    assert gpus.job_gpus({"n1": ["auto"]}, [4, 8], cap=1) == 1
    assert gpus.job_gpus({"n1": ["auto", 2]}, [4], cap=1) == 2  # a fixed count still needs its GPUs
    assert gpus.job_gpus({"n1": ["auto"]}, [4], cap=None) == 4


def _backend(tmp_path, body):
    from launcher.backends.slurm.job import SlurmJob
    from launcher.app.up import plan_for
    from launcher.loader.load import LoadedSpec, parse_spec

    path = tmp_path / "c.yaml"
    path.write_text("name: g\nbackend: slurm\nentrypoint: python -m worker\n" + body)
    loaded = LoadedSpec(parse_spec(path.read_text(), str(path)), path)
    backend = SlurmJob(loaded)  # the job as allocate() leaves it: its srun lines and task environments
    backend.job_id = "42"
    plan = plan_for(loaded.spec)
    takes = backend.takes([t.key for t in plan.tasks])
    backend.steps = gpus.steps(takes, {t.key: t.host for t in plan.tasks}, 2, 4)
    return backend, plan


def test_gpu_steps_are_exact_cpu_steps_overlap_and_the_request_marker_stays_off_the_step(tmp_path):
    backend, plan = _backend(tmp_path, "strategy: parameter_server\ntasks: {chief: 1, worker: 2, ps: 1}\n"
                             "devices: {gpus_per_task: 1, threads: auto}\nslurm: {tasks_per_node: 2}\n")
    worker = plan.task("worker:0")
    argv = backend.srun_argv(worker, "worker-0.1")
    assert "--exact" in argv and "--gpus-per-task=1" in argv and "--cpus-per-task=2" in argv
    assert "--overlap" not in argv
    env = backend.task_env(worker, {})
    assert "TFCLUSTER_GPUS" not in env and "CUDA_VISIBLE_DEVICES" not in env  # Slurm sets it
    assert env["TFCLUSTER_THREADS"] == "0/1"  # its own CPUs: the budget is all of them
    ps = plan.task("ps:0")
    argv = backend.srun_argv(ps, "ps-0.1")
    assert "--overlap" in argv and "--gres=none" in argv and "--exact" not in argv
    assert argv[argv.index("-c") + 1].startswith("export CUDA_VISIBLE_DEVICES=-1; ")
    assert backend.task_env(ps, {})["CUDA_VISIBLE_DEVICES"] == "-1"


def test_shared_gpu_steps_grow_memory_unless_the_spec_env_says(tmp_path):
    body = "strategy: multi_worker_mirrored\ntasks: {worker: 3}\nslurm: {tasks_per_node: 3}\n"
    backend, plan = _backend(tmp_path, body)
    argv = backend.srun_argv(plan.task("worker:2"), "worker-2.1")
    assert "--overlap" in argv and "--gres=gpu:2" in argv
    assert backend.task_env(plan.task("worker:2"), {})["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    backend, plan = _backend(tmp_path, body + "env: {TF_FORCE_GPU_ALLOW_GROWTH: 'false'}\n")
    assert backend.task_env(plan.task("worker:2"), {})["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    backend, plan = _backend(tmp_path, body.replace("worker: 3", "worker: 2") + "devices: {gpu_memory: 2048}\n")
    env = backend.task_env(plan.task("worker:1"), {})
    assert env["TFCLUSTER_GPU_MEMORY"] == "2048" and "TF_FORCE_GPU_ALLOW_GROWTH" not in env


@pytest.mark.parametrize("env, said", [
    ({"SLURM_STEP_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}, [1]),  # the node's index, not the cgroup's
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, [0, 1]),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, []),  # a CPU step
    ({}, None),  # nothing said: no event
])
def test_the_step_line_says_the_gpus_slurm_gave_it(env, said):
    """The step's shell (a real /bin/sh) prints its GPUs on its first line; the step handle reads
    them off it (and hides the line) and hands them on, as the backend's task_gpus event."""
    import subprocess

    import sys

    from launcher.backends.base import OutputSink
    from launcher.backends.slurm.step import STEP_SHELL, SlurmStep, shell_args
    from launcher.plan.build import PlannedTask

    proc = subprocess.Popen(["/bin/sh", "-c", STEP_SHELL, "sh", *shell_args(sys.executable, ["echo", "task output"])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3", **env})
    got, lines, control = [], [], []
    task = PlannedTask(type="worker", index=0, host="n1", address="n1", port=1, command=("true",))
    step = SlurmStep(task, proc, OutputSink(lambda key, line: lines.append(line), lambda key, line: control.append(line)),
                     "7", "worker-0.1", "n1", lambda key, ids: got.append((key, ids)))
    proc.wait(timeout=30)
    step._reader.join(10)
    assert lines == ["task output"] and step.step_id == "7.3" and control == []
    assert got == ([] if said is None else [("worker:0", said)])


def test_sinfo_with_cpus_gives_each_nodes_gpus_and_cpus():
    text = "n1|gpu:a100:4(S:0-1)|64\nn1|gpu:a100:4(S:0-1)|64\nn2|(null)|8\nn3|gpu:2\n"
    assert gpus.parse_nodes(text) == {"n1": (4, 64), "n2": (0, 8), "n3": (2, 0)}


def test_default_cpus_per_task_divides_the_smallest_nodes_cpus_among_its_tasks():
    assert gpus.default_cpus_per_task([16, 32], 4) == 4
    assert gpus.default_cpus_per_task([16, 32], 3) == 5  # floor: every task the same
    assert gpus.default_cpus_per_task([16], 4, max_per_node=8) == 2  # the partition's MaxCPUsPerNode
    assert gpus.default_cpus_per_task([2], 4) == 1
    assert gpus.default_cpus_per_task([0], 2) == 1  # Slurm said nothing: its default


def test_the_users_own_cpu_options_are_recognised():
    for opts in (["--exclusive"], ["--cpus-per-task=8"], ["-c8"], ["--mincpus=4"], ["--cpus-per-gpu=6"]):
        assert gpus.asks_cpus(opts), opts
    for opts in ([], ["--constraint=a100"], ["--gres=gpu:4"], ["--mem=0"]):
        assert not gpus.asks_cpus(opts), opts


def test_a_typed_gpu_request_in_the_users_sbatch_options_is_found():
    assert gpus.user_gpus(["--gres=gpu:a100:4"]) == ("a100", 4)
    assert gpus.user_gpus(["--gres=gpu:4"]) == (None, 4)
    assert gpus.user_gpus(["--gres=mps:100,gpu:h100:8(S:0-1)"]) == ("h100", 8)
    assert gpus.user_gpus(["--gpus-per-node=a100:2"]) == ("a100", 2)
    assert gpus.user_gpus(["--gpus=a100:8"]) == ("a100", None)  # a job total: the type only
    assert gpus.user_gpus(["--gpus-per-node=2"]) == (None, 2)
    assert gpus.user_gpus(["--exclusive", "--mem=0"]) == (None, None)


def test_typed_gres_makes_every_steps_request_typed_and_steps_get_their_cpus():
    nodes = {"worker:0": "n1", "worker:1": "n1", "ps:0": "n1"}
    out = gpus.steps({"worker:0": 1, "worker:1": 1, "ps:0": 0}, nodes, per_node=2, cpus_per_node=12,
                     gpu_type="a100")
    assert out["worker:0"].srun == ("--exact", "--cpus-per-task=4", "--gpus-per-task=a100:1")
    out = gpus.steps({"worker:0": "all"}, {"worker:0": "n1"}, 4, 8, gpu_type="a100")
    assert out["worker:0"].srun == ("--overlap", "--gres=gpu:a100:4")
    # slurm.cpus_per_task: exactly that, whatever the node holds.
    out = gpus.steps({"worker:0": 1}, {"worker:0": "n1"}, 1, 32, cpus_per_task=6)
    assert "--cpus-per-task=6" in out["worker:0"].srun


def test_shared_auto_keeps_each_task_one_gpu_as_local_divides_them():
    keys = [f"worker:{i}" for i in range(3)]
    out = gpus.steps({k: "auto" for k in keys}, {k: "n1" for k in keys}, per_node=2, cpus_per_node=6)
    # The local backend's round-robin: 0, 1, 0 (positions among the step's GPUs; cut is 1-based).
    assert [gpus.local_share(i, 3, 2) for i in range(3)] == [[0], [1], [0]]
    assert ["cut -d, -f1)" in out[k].shell for k in keys] == [True, False, True]
    assert "cut -d, -f2)" in out["worker:1"].shell
    assert all(o.shared and o.srun == ("--overlap", "--gres=gpu:2") for o in out.values())


def test_the_pick_shell_keeps_the_chosen_gpus_of_what_slurm_showed(tmp_path):
    import subprocess

    shell = gpus.pick_shell([1]) + 'echo "$CUDA_VISIBLE_DEVICES|${SLURM_STEP_GPUS:-unset}"'
    run = lambda env: subprocess.run(["/bin/sh", "-c", shell], capture_output=True, text=True,  # noqa: E731
                                     env={"PATH": "/usr/bin:/bin", **env}).stdout.strip()
    assert run({"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_STEP_GPUS": "2,3"}) == "1|3"
    assert run({"CUDA_VISIBLE_DEVICES": "4,5,6"}) == "5|unset"


def _launch(tmp_path, monkeypatch, body, nodes=None):
    """SlurmBackend.launch_lines for a spec, the partition's nodes as sinfo would say them."""
    from launcher.app.up import plan_for
    from launcher.backends.slurm import cli
    from launcher.backends.slurm.backend import SlurmBackend
    from launcher.loader.load import LoadedSpec, parse_spec

    monkeypatch.setattr(cli, "partition", lambda name: cli.Partition(name or "gpu", "UP", 2, None, None, True))
    monkeypatch.setattr(gpus, "partition_nodes", lambda name: nodes or {"g1": (4, 64), "g2": (4, 64)})
    path = tmp_path / "c.yaml"
    path.write_text("name: g\nstrategy: multi_worker_mirrored\nbackend: slurm\nentrypoint: python -m worker\n" + body)
    loaded = LoadedSpec(parse_spec(path.read_text(), str(path)), path)
    return SlurmBackend.launch_lines(loaded, plan_for(loaded.spec))


def test_the_sbatch_line_asks_cpus_per_task_from_the_nodes_cpus(tmp_path, monkeypatch):
    lines = _launch(tmp_path, monkeypatch, "tasks: {worker: 8}\nslurm: {tasks_per_node: 4}\n")
    sbatch = list(lines.allocation)
    for opt in ("--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=16", "--gres=gpu:4"):
        assert opt in sbatch, sbatch
    assert sbatch[-2:] == ["--wrap", "exec sleep infinity"]
    for key, argv in lines.tasks.items():
        assert argv[:2] == ("srun", "--jobid=JOB"), argv
        assert "--exact" in argv and "--cpus-per-task=16" in argv and "--gpus-per-task=1" in argv, (key, argv)
    assert lines.tasks["worker:0"][4] == "--nodelist=node1" and lines.tasks["worker:7"][4] == "--nodelist=node2"


def test_cpus_per_task_and_the_users_own_cpu_options_win(tmp_path, monkeypatch):
    lines = _launch(tmp_path, monkeypatch, "tasks: {worker: 2}\nslurm: {tasks_per_node: 2, cpus_per_task: 3}\n")
    assert "--cpus-per-task=3" in lines.allocation and "--cpus-per-task=3" in lines.tasks["worker:1"]
    lines = _launch(tmp_path, monkeypatch, "tasks: {worker: 2}\nslurm: {tasks_per_node: 2, sbatch: [--exclusive]}\n")
    assert not any(a.startswith("--cpus-per-task") for a in lines.allocation), lines.allocation
    assert "--cpus-per-task=32" in lines.tasks["worker:0"]  # half of the node the job holds whole
    # A CPU run: Slurm's default, nothing added.
    lines = _launch(tmp_path, monkeypatch, "tasks: {worker: 2}\ndevices: {gpus: 0}\n")
    assert not any(a.startswith(("--cpus-per-task", "--gres")) for a in lines.allocation), lines.allocation


def test_a_typed_gres_makes_the_step_lines_typed_and_sets_the_gpus_they_divide(tmp_path, monkeypatch):
    lines = _launch(tmp_path, monkeypatch,
                    "tasks: {worker: 2}\nslurm: {tasks_per_node: 2, sbatch: ['--gres=gpu:a100:2']}\n")
    assert "--gres=gpu:a100:2" in lines.allocation and "--gres=gpu:4" not in lines.allocation
    assert all("--gpus-per-task=a100:1" in argv for argv in lines.tasks.values()), lines.tasks


def test_plan_prints_the_commands_or_says_in_one_line_why_not(tmp_path, monkeypatch, capsys):
    from launcher.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text("name: g\nstrategy: multi_worker_mirrored\nbackend: slurm\nentrypoint: python -m worker\n"
                    "tasks: {worker: 2}\nslurm: {partition: nowhere}\n")
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no Slurm commands here
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    said = [ln for ln in out.splitlines() if ln.startswith("commands on backend slurm")]
    assert said == ["commands on backend slurm: not shown: slurm: 'scontrol' not found on PATH; install the Slurm "
                    "client commands (Debian: slurm-client) or run tfcluster on a login node"], out
    assert main(["plan", str(path), "--json"]) == 0
    import json

    assert "error" in json.loads(capsys.readouterr().out)["launch"]


def _takes():
    from hypothesis import strategies as st

    return st.lists(st.sampled_from([0, 1, 2, "auto", "auto", "all"]), min_size=1, max_size=8)


def test_steps_property_equal_auto_shares_within_the_nodes_gpus_and_cpus():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=150, deadline=None)
    @given(takes=_takes(), per_node=st.integers(0, 8), cpus=st.integers(1, 128), typed=st.sampled_from([None, "a100"]))
    def check(takes, per_node, cpus, typed):
        if "all" in takes and any(isinstance(t, str) and t != "all" or isinstance(t, int) and t for t in takes):
            takes = ["all" if t else 0 for t in takes]  # all with others: not this property's subject
        keys = {f"worker:{i}": t for i, t in enumerate(takes)}
        fixed = sum(t for t in takes if isinstance(t, int))
        if fixed > per_node:
            return  # the partition check refuses it
        out = gpus.steps(keys, {k: "n1" for k in keys}, per_node, cpus, gpu_type=typed)
        own = [o for o in out.values() if o.exclusive]
        assert sum(o.gpus for o in own) <= per_node
        assert len({o.gpus for k, o in out.items() if o.exclusive and keys[k] == "auto"}) <= 1  # equal auto shares
        assert sum(int(a.split("=")[1]) for o in own for a in o.srun if a.startswith("--cpus-per-task=")) <= max(
            cpus, len(own))
        for key, o in out.items():
            request = [a for a in o.srun if a.startswith(("--gpus-per-task=", "--gres=gpu:"))]
            if typed and request:
                assert all(":a100:" in a or "=a100:" in a for a in request), o.srun
            if keys[key] == "auto" and o.shared and o.shell:
                kept = [int(p) - 1 for p in o.shell.split("-f")[1].split(")")[0].split(",")]
                assert all(fixed <= p < per_node for p in kept), (o.shell, fixed, per_node)

    check()


def test_auto_steps_divide_a_node_as_every_backend_does_workers_equal_the_rest_to_the_evaluator():
    # TensorFlow's rule (gpuplace.shares): trainers equal; a remainder never to the first workers.
    nodes = {"worker:0": "n1", "worker:1": "n1", "worker:2": "n1"}
    out = gpus.steps({k: "auto" for k in nodes}, nodes, per_node=8, cpus_per_node=8)
    assert [out[k].gpus for k in nodes] == [2, 2, 2]  # 3/3/2 would be unequal: two GPUs idle instead
    nodes = {"worker:0": "n1", "worker:1": "n1", "evaluator:0": "n1"}
    out = gpus.steps({k: "auto" for k in nodes}, nodes, per_node=8, cpus_per_node=8)
    assert (out["worker:0"].gpus, out["worker:1"].gpus, out["evaluator:0"].gpus) == (3, 3, 2)
    assert gpus.auto_counts(["chief:0", "worker:0", "worker:1", "evaluator:0"], 4) == {
        "chief:0": 1, "worker:0": 1, "worker:1": 1, "evaluator:0": 1}
