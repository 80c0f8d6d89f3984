"""When warm standby is on (launcher/supervise/standby.py's decide, pure) and what ``tfcluster plan`` says."""

from __future__ import annotations

import pytest

from launcher.spec.model import Restart
from launcher.supervise.standby import decide, is_reference_worker

WORKER = ["python", "-m", "worker", "--epochs", "2"]


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "worker"], True), (["python3.11", "-X", "dev", "-m", "worker"], True),
    (["/venv/bin/python", "-mworker.main"], True), (["tfcluster-worker", "--epochs", "1"], True),
    (["/opt/bin/tfcluster-worker"], True), (["python", "train.py"], False), (["python", "-m", "mytrain"], False),
    (["bash", "-c", "python -m worker"], False), ([], False),
])
def test_the_reference_worker_is_recognised(argv, expected):
    assert is_reference_worker(argv) is expected


def test_auto_is_on_for_the_reference_worker_on_a_backend_that_can():
    on, why = decide(Restart(max_restarts=2), [WORKER, WORKER], True, "ssh")
    assert on and why.startswith("on (auto: tfcluster's worker)") and "0.6 GB each" in why


@pytest.mark.parametrize("restart, commands, capable, elastic, off_because", [
    (Restart(max_restarts=2, warm_standby=False), [WORKER], True, False, "off (restart.warm_standby: false)"),
    (Restart(max_restarts=2), [WORKER], False, False, "off: backend slurm keeps no standby; every restart starts cold"),
    (Restart(max_restarts=0), [WORKER], True, False, "off: restart.max_restarts is 0"),
    (Restart(max_restarts=2), [WORKER, ["python", "train.py", "--x"]], True, False,
     "off: the entrypoint (python train.py --x) is not tfcluster's worker; set restart.warm_standby: true"),
])
def test_auto_leaves_it_off_and_says_why(restart, commands, capable, elastic, off_because):
    on, why = decide(restart, commands, capable, "slurm", elastic=elastic)
    assert not on and why.startswith(off_because), why


def test_true_trusts_the_entrypoint_and_elastic_runs_move_tasks_without_restarts():
    assert decide(Restart(max_restarts=1, warm_standby=True), [["python", "train.py"]], True, "local")[0]
    assert decide(Restart(max_restarts=0), [WORKER], True, "ssh", elastic=True)[0]
    on, why = decide(Restart(max_restarts=1, warm_standby=True), [WORKER], False, "queue")
    assert not on and why == ("off: backend queue keeps no standby; every restart starts cold "
                              "(restart.warm_standby: true has no effect here)")


def test_a_backend_that_can_may_refuse_a_spec_and_says_why():
    """``Backend.standby_off`` (slurm: GPU tasks dividing a node's GPUs) wins over auto and true."""
    why = "GPU tasks worker:0 and worker:1 divide their node's GPUs"
    assert decide(Restart(max_restarts=2), [WORKER], True, "slurm", refused=why) == (False, f"off on backend slurm: {why}")
    on, said = decide(Restart(max_restarts=2, warm_standby=True), [WORKER], True, "slurm", refused=why)
    assert not on and said.endswith("(restart.warm_standby: true has no effect here)")
    assert decide(Restart(max_restarts=2, warm_standby=False), [WORKER], True, "slurm", refused=why)[1] == \
        "off (restart.warm_standby: false)"
    assert decide(Restart(max_restarts=2), [WORKER], True, "slurm", refused=None)[0]


def test_plan_says_whether_standby_is_on(tmp_path):
    from tests.support.cli import tfcluster

    base = "name: t\nstrategy: multi_worker_mirrored\nentrypoint: {e}\ntasks: {{worker: 2}}\nrestart: {{max_restarts: 2}}\n"
    lines = {}
    for name, text in (("worker", base.format(e="python -m worker")), ("own", base.format(e="python train.py")),
                       ("docker", base.format(e="python -m worker") + "backend: docker\n"),
                       ("slurm", base.format(e="python -m worker") + "backend: slurm\n")):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text)
        out = tfcluster("plan", str(spec))
        assert out.returncode == 0, out.stderr
        (lines[name],) = [line for line in out.stdout.splitlines() if line.startswith("warm standby: ")]
    assert lines["worker"].startswith("warm standby: on (auto: tfcluster's worker)")
    assert lines["own"].startswith("warm standby: off: the entrypoint (python train.py) is not tfcluster's worker")
    # docker keeps its standbys in containers of their own (launcher/backends/docker/standby.py)
    assert lines["docker"].startswith("warm standby: on (auto: tfcluster's worker)")
    # slurm keeps one more job step per task (launcher/backends/slurm/standby.py); off only where GPU
    # tasks divide a node's GPUs (tests/unit/backends/slurm/test_slurm_standby.py)
    assert lines["slurm"].startswith("warm standby: on (auto: tfcluster's worker)")
