"""The slurm backend's pure parts: the ``slurm:`` options' one-line errors, the sbatch and srun
command lines, node placement, and parsing of scontrol's output (the real commands run in
tests/integration/slurm)."""

from __future__ import annotations

import os
import textwrap

import pytest

from launcher.backends.slurm.alloc import Request, nodes_needed, placement
from launcher.backends.slurm.cli import _partitions, client_env, fields, first_error
from launcher.errors import LaunchError
from launcher.loader.load import parse_spec
from tests.support.errors import one_error
from tests.support.specs import SLURM_BASE

BASE = SLURM_BASE


def test_slurm_options_defaults_and_values():
    spec = parse_spec(BASE + 'slurm:\n  partition: debug\n  time: "02:00:00"\n  nodes: 2\n  sbatch: ["--exclusive"]\n')
    o = spec.slurm
    assert (o.partition, o.time, o.nodes, o.tasks_per_node, o.sbatch, o.python, o.queue_timeout) == (
        "debug", "02:00:00", 2, 1, ("--exclusive",), "python3", 600.0)


def test_unknown_slurm_key_lists_the_valid_ones():
    line = one_error(BASE + "slurm:\n  partion: debug\n")
    assert line.startswith("c.yaml:8: slurm.partion: unknown key 'partion'"), line
    assert "did you mean 'partition'" in line and "queue_timeout" in line


@pytest.mark.parametrize("value", ["2h", "02:00:00:00", "soon"])
def test_bad_time_limit_names_the_formats(value):
    line = one_error(BASE + f"slurm:\n  time: {value}\n")
    assert line.startswith("c.yaml:8: slurm.time: ") and "HH:MM:SS" in line, line


@pytest.mark.parametrize("value", ["30", "02:00:00", "1-12:00:00", "1-12", "UNLIMITED"])
def test_slurm_time_formats_accepted(value):
    assert parse_spec(BASE + f'slurm:\n  time: "{value}"\n').slurm.time == value


def test_sbatch_items_must_be_options_and_not_the_ones_tfcluster_sets():
    assert "is not an option" in one_error(BASE + 'slurm:\n  sbatch: ["gres=gpu:4"]\n')
    line = one_error(BASE + 'slurm:\n  sbatch: ["--nodes=4"]\n')
    assert "tfcluster sets --nodes itself" in line and "slurm.nodes" in line, line
    assert "--jobid" in one_error(BASE + 'slurm:\n  srun: ["--jobid=3"]\n')


def test_zero_nodes_and_too_few_slots_are_spec_errors():
    assert one_error(BASE + "slurm:\n  nodes: 0\n") == "c.yaml:8: slurm.nodes: must be a whole number >= 1 (got 0)"
    line = one_error(BASE + "slurm:\n  nodes: 1\n  tasks_per_node: 1\n")
    assert line == ("c.yaml:8: slurm.nodes: 1 node(s) x 1 task(s) per node hold 1 tasks, the spec has 2; raise "
                    "slurm.nodes or slurm.tasks_per_node, or drop slurm.nodes for the default"), line


def test_sbatch_command_line_holds_the_allocation_and_passes_extras_through():
    req = Request(job_name="tfcluster-demo", nodes=2, tasks_per_node=1, partition="debug", time="10",
                  account="proj", extra=("--gres=gpu:4", "--exclusive"))
    argv = req.sbatch_argv()
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-2:] == ["--wrap", "exec sleep infinity"]
    for opt in ("--job-name=tfcluster-demo", "--nodes=2", "--ntasks-per-node=1", "--partition=debug", "--time=10",
                "--account=proj", "--gres=gpu:4", "--exclusive", "--export=NONE", "--no-requeue"):
        assert opt in argv
    assert "--test-only" in req.sbatch_argv(test_only=True) and "--test-only" not in argv
    assert not any(a.startswith("--partition") for a in Request("j", 1, 1).sbatch_argv())


def test_nodes_needed_defaults_to_enough_for_every_task():
    assert nodes_needed(4, 1, None) == 4
    assert nodes_needed(5, 2, None) == 3
    assert nodes_needed(2, 1, 3) == 3


def test_placement_uses_addresses_in_slurms_node_order():
    # Names that sort differently from Slurm's order (n10 before n2 as strings) keep Slurm's order.
    nodes = ["n2", "n10"]
    addrs = {"n2": "10.0.0.2", "n10": "10.0.0.10"}
    assert placement(["worker:0", "worker:1"], nodes, addrs, 1) == {
        "worker:0": ("n2", "10.0.0.2"), "worker:1": ("n10", "10.0.0.10")}


def test_placement_spreads_tasks_without_exceeding_tasks_per_node():
    keys = ["chief:0", "worker:0", "worker:1", "ps:0"]
    nodes = ["a", "b", "c"]
    got = placement(keys, nodes, {n: n.upper() for n in nodes}, 2)
    assert [got[k][0] for k in keys] == ["a", "a", "b", "c"]
    got = placement(keys, ["a", "b"], {"a": "A", "b": "B"}, 2)
    assert [got[k][0] for k in keys] == ["a", "a", "b", "b"]
    with pytest.raises(LaunchError):
        placement(keys, ["a"], {"a": "A"}, 2)


def test_scontrol_one_line_output_is_parsed():
    line = "NodeName=n2 Arch=x86_64 CPUTot=4 NodeAddr=10.232.0.12 NodeHostName=n2 State=IDLE OS=Linux 6.1 #1 SMP"
    f = fields(line)
    assert f["NodeName"] == "n2" and f["NodeAddr"] == "10.232.0.12" and f["State"] == "IDLE"
    text = ("PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED State=UP TotalCPUs=12 TotalNodes=3\n"
            "PartitionName=big Default=NO MaxNodes=2 State=DOWN TotalNodes=8\n")
    debug, big = _partitions(text)
    assert (debug.name, debug.default, debug.total_nodes, debug.max_nodes, debug.state) == ("debug", True, 3, None, "UP")
    assert (big.default, big.total_nodes, big.max_nodes, big.state) == (False, 8, 2, "DOWN")


def test_first_error_keeps_slurms_reason_without_its_prefix():
    class P:
        returncode, stdout = 1, ""
        stderr = "sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: Requested node configuration is not available\n"
    assert first_error(P()) == "Batch job submission failed: Requested node configuration is not available"


def test_client_env_drops_an_enclosing_jobs_variables(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_NODELIST", "x[1-2]")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    env = client_env()
    assert "SLURM_JOB_ID" not in env and "SLURM_NODELIST" not in env
    assert env["SLURM_CONF"] == "/etc/slurm/slurm.conf"


def test_plan_shows_placeholder_nodes_laid_out_like_the_allocation(tmp_path, capsys):
    from launcher.cli.main import main

    spec = tmp_path / "c.yaml"
    spec.write_text(textwrap.dedent("""\
        name: demo
        strategy: parameter_server
        backend: slurm
        entrypoint: python -m worker
        tasks: {chief: 1, worker: 2, ps: 1}
        slurm: {nodes: 3, tasks_per_node: 2}
    """))
    assert main(["plan", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "placeholder placement: slurm assigns the nodes when the job starts" in out, out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("  ") and ":" in
            line.split()[0] and len(line.split()) > 2 and line.split()[1].startswith("node")}
    assert rows == {"chief:0": "node1", "worker:0": "node1", "worker:1": "node2", "ps:0": "node3"}, out


def test_a_step_runs_on_its_node_in_the_job_and_its_env_stays_off_the_command_line(tmp_path):
    from launcher.app.up import plan_for
    from launcher.backends.slurm.job import SlurmJob
    from launcher.loader.load import LoadedSpec

    path = tmp_path / "c.yaml"
    path.write_text(BASE + "env: {API_TOKEN: s3cret}\nslurm:\n  python: /opt/venv/bin/python\n  srun: [\"--mem=0\"]\n")
    loaded = LoadedSpec(parse_spec(path.read_text(), str(path)), path)
    backend = SlurmJob(loaded)
    backend.job_id = "42"
    task = plan_for(loaded.spec).task("worker:1")
    argv = backend.srun_argv(task, "worker-1.3")
    assert argv[0] == "srun"
    for opt in ("--jobid=42", "--nodes=1", "--ntasks=1", "--nodelist=node2", "--overlap", "--job-name=worker-1.3",
                "--export=ALL", f"--chdir={tmp_path}", "--mem=0"):
        assert opt in argv, opt
    assert argv[-3:] == ["python", "-m", "worker"]
    assert not any("s3cret" in a or "TF_CONFIG" in a for a in argv)
    env = backend.task_env(task, {"TFCLUSTER_RESTART_COUNT": "1"})
    assert env["API_TOKEN"] == "s3cret" and env["TFCLUSTER_TASK"] == "worker:1"
    assert env["PATH"].startswith("/opt/venv/bin" + os.pathsep) and env["TFCLUSTER_RESTART_COUNT"] == "1"


@pytest.mark.parametrize("final, said", [("CANCELLED", "(CANCELLED)"), ("COMPLETING", "(COMPLETING)")])
def test_a_restart_in_an_ending_allocation_waits_for_the_state_that_says_why(tmp_path, monkeypatch, final, said):
    """scancel makes the job COMPLETING for a moment, then CANCELLED: the one-line error names
    the final state when Slurm reaches it in time (CI once printed ``(COMPLETING)`` instead)."""
    from launcher.backends.slurm import backend as slurm_backend
    from launcher.backends.slurm.cli import JobState
    from launcher.errors import AttemptImpossible
    from launcher.loader.load import LoadedSpec

    path = tmp_path / "c.yaml"
    path.write_text(BASE + "slurm: {}\n")
    backend = slurm_backend.SlurmBackend.from_spec(LoadedSpec(parse_spec(path.read_text(), str(path)), path))
    backend.tasks.job.job_id = "42"
    states = iter(["COMPLETING", "COMPLETING"] + [final] * 100)
    asked = []
    monkeypatch.setattr(slurm_backend.cli, "job_state", lambda job: asked.append(job) or JobState(next(states), "", ""))
    monkeypatch.setattr(slurm_backend, "COMPLETING_WAIT", 2.0)
    with pytest.raises(AttemptImpossible) as err:
        backend.tasks.prepare_attempt(1)
    assert f"slurm: allocation job 42 is no longer running {said}" in str(err.value), err.value
    assert asked[0] == "42" and len(asked) >= 3
