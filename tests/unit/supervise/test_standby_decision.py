"""When warm standby is on (launcher/supervise/standby.py's decide, pure) and what ``tfcluster plan`` says."""

from __future__ import annotations

import pytest

from launcher.backends.base import Capabilities
from launcher.spec.model import Restart
from launcher.supervise.standby import decide, forks, is_reference_worker, python_entry, stub_command

WORKER = ["python", "-m", "worker", "--epochs", "2"]
CAN = Capabilities(warm_standby=True)
FORKS = Capabilities(warm_standby=True, fork=True)  # a backend that keeps a warm parent per host
CANNOT = Capabilities()


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "worker"], True), (["python3.11", "-X", "dev", "-m", "worker"], True),
    (["/venv/bin/python", "-mworker.main"], True), (["tfcluster-worker", "--epochs", "1"], True),
    (["/opt/bin/tfcluster-worker"], True), (["python", "train.py"], False), (["python", "-m", "mytrain"], False),
    (["bash", "-c", "python -m worker"], False), ([], False),
])
def test_the_reference_worker_is_recognised(argv, expected):
    assert is_reference_worker(argv) is expected


def test_auto_is_on_for_the_reference_worker_on_a_backend_that_can():
    on, why = decide(Restart(max_restarts=2), [WORKER, WORKER], CAN, "ssh")
    assert on and why.startswith("on (auto: tfcluster's worker)") and "0.6 GB each" in why
    on, why = decide(Restart(max_restarts=2), [WORKER, WORKER], FORKS, "local")  # its zygote forks them
    assert on and "forked from its host's zygote, which imports TensorFlow once" in why and "GB each" not in why


def test_the_fork_is_the_capabilitys_and_the_specs_never_the_backends_name():
    """Whether starts ask for the host's warm parent (StartRequest.fork) follows Capabilities.fork
    and restart.warm_standby alone: a backend of any name that keeps one is said to fork."""
    assert forks(FORKS, Restart()) and forks(FORKS, Restart(warm_standby=True))
    assert not forks(FORKS, Restart(warm_standby=False)) and not forks(CAN, Restart())
    on, why = decide(Restart(max_restarts=2), [WORKER], FORKS, "ssh")
    assert on and "forked from its host's zygote" in why
    assert "forked" not in decide(Restart(max_restarts=2), [WORKER], CAN, "local")[1]


@pytest.mark.parametrize("restart, commands, capable, elastic, off_because", [
    (Restart(max_restarts=2, warm_standby=False), [WORKER], True, False, "off (restart.warm_standby: false)"),
    (Restart(max_restarts=2), [WORKER], False, False, "off: backend slurm keeps no standby; every restart starts cold"),
    (Restart(max_restarts=0), [WORKER], True, False, "off: restart.max_restarts is 0"),
    (Restart(max_restarts=2), [WORKER, ["bash", "train.sh", "--x"]], True, False,
     "off: the entrypoint (bash train.sh --x) is neither tfcluster's worker nor a Python script or module "
     "(not a Python interpreter); set restart.warm_standby: true"),
    (Restart(max_restarts=2), [["python", "-c", "import train"]], True, False,
     "off: the entrypoint (python -c import train) is neither tfcluster's worker nor a Python script or module "
     "(the interpreter option -c (a command string))"),
    (Restart(max_restarts=2, warm_standby=False), [["python", "train.py"]], True, False,
     "off (restart.warm_standby: false)"),
])
def test_auto_leaves_it_off_and_says_why(restart, commands, capable, elastic, off_because):
    on, why = decide(restart, commands, Capabilities(warm_standby=capable), "slurm", elastic=elastic)
    assert not on and why.startswith(off_because), why


def test_auto_is_on_for_a_python_script_or_module_of_ones_own_under_the_stub():
    on, why = decide(Restart(max_restarts=2), [["python", "train.py", "--epochs", "3"], ["python3", "-m", "pkg.train"]],
                     FORKS, "local")
    assert on and why.startswith("on (auto: a Python entrypoint)"), why
    assert "python train.py --epochs ..., python3 -m pkg.train: under tfcluster's standby stub" in why


@pytest.mark.parametrize("argv, split", [
    (["python", "train.py", "--x"], (["python"], ["train.py", "--x"])),
    (["/venv/bin/python3.11", "-u", "-X", "dev", "-m", "pkg", "a"], (["/venv/bin/python3.11", "-u", "-X", "dev"],
                                                                      ["-m", "pkg", "a"])),
    (["python", "-um", "pkg"], (["python", "-u"], ["-m", "pkg"])),
    (["python", "-mpkg.sub", "-v"], (["python"], ["-m", "pkg.sub", "-v"])),
    (["python", "-Wignore", "-B", "t.py", "-m"], (["python", "-Wignore", "-B"], ["t.py", "-m"])),
    (["python", "--", "t.py"], (["python", "--"], ["t.py"])),
])
def test_python_entrypoints_are_split_into_interpreter_options_and_the_program(argv, split):
    assert python_entry(argv) == (split, "")
    stub = stub_command(argv)
    assert stub[:len(split[0])] == split[0] and stub[len(split[0])] == "-c" and stub[len(split[0]) + 2:] == split[1]
    assert "tfcluster-standby promoted" in stub[len(split[0]) + 1]
    # the variables' names put in from launcher/contract/envnames.py
    assert "STANDBY, STANDBY_ENV, CONTROL = 'TFCLUSTER_STANDBY', 'TFCLUSTER_STANDBY_ENV', 'TFCLUSTER_CONTROL_FD'" in stub[len(split[0]) + 1]
    compile(stub[len(split[0]) + 1], "<string>", "exec")


@pytest.mark.parametrize("argv, why", [
    (["python", "-c", "x"], "the interpreter option -c (a command string)"), (["python", "-i", "t.py"], "the interpreter option -i"),
    (["python"], "no script (the program comes from stdin)"), (["python", "-"], "no script (the program comes from stdin)"),
    (["python", "--check-hash-based-pycs", "always", "t.py"], "the interpreter option --check-hash-based-pycs"),
    (["bash", "t.py"], "not a Python interpreter"), (["pythonista", "t.py"], "not a Python interpreter"),
])
def test_what_the_stub_does_not_take_is_said(argv, why):
    parts, said = python_entry(argv)
    assert parts is None and said.startswith(why) and stub_command(argv) is None


def test_the_reference_worker_runs_as_it_is():
    assert stub_command(WORKER) is None and stub_command(["tfcluster-worker"]) is None


def test_true_trusts_the_entrypoint_and_elastic_runs_move_tasks_without_restarts():
    assert decide(Restart(max_restarts=1, warm_standby=True), [["python", "train.py"]], FORKS, "local")[0]
    assert decide(Restart(max_restarts=0), [WORKER], CAN, "ssh", elastic=True)[0]
    on, why = decide(Restart(max_restarts=1, warm_standby=True), [WORKER], CANNOT, "queue")
    assert not on and why == ("off: backend queue keeps no standby; every restart starts cold "
                              "(restart.warm_standby: true has no effect here)")


def test_a_backend_that_can_may_refuse_a_spec_and_says_why():
    """``Hosts.standby_off`` (slurm: GPU tasks dividing a node's GPUs) wins over auto and true."""
    why = "GPU tasks worker:0 and worker:1 divide their node's GPUs"
    assert decide(Restart(max_restarts=2), [WORKER], CAN, "slurm", refused=why) == (False, f"off on backend slurm: {why}")
    on, said = decide(Restart(max_restarts=2, warm_standby=True), [WORKER], CAN, "slurm", refused=why)
    assert not on and said.endswith("(restart.warm_standby: true has no effect here)")
    assert decide(Restart(max_restarts=2, warm_standby=False), [WORKER], CAN, "slurm", refused=why)[1] == \
        "off (restart.warm_standby: false)"
    assert decide(Restart(max_restarts=2), [WORKER], CAN, "slurm", refused=None)[0]


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
    assert lines["own"].startswith("warm standby: on (auto: a Python entrypoint)")
    assert "python train.py: under tfcluster's standby stub" in lines["own"]
    # docker keeps its standbys in containers of their own (launcher/backends/docker/standby.py)
    assert lines["docker"].startswith("warm standby: on (auto: tfcluster's worker)")
    # slurm keeps one more job step per task (launcher/backends/slurm/standby.py); off only where GPU
    # tasks divide a node's GPUs (tests/unit/backends/slurm/test_slurm_standby.py)
    assert lines["slurm"].startswith("warm standby: on (auto: tfcluster's worker)")


@pytest.mark.parametrize("restart, zygote", [("{max_restarts: 0}", True), ("{max_restarts: 0, warm_standby: false}", False),
                                             ("{max_restarts: 2, warm_standby: false}", False)])
def test_the_local_plan_says_its_tasks_are_forked_from_the_zygote_without_standbys_unless_told_not_to(tmp_path, restart,
                                                                                                   zygote):
    from launcher.app.up import plan_for
    from launcher.loader.load import parse_spec
    from launcher.supervise.standby import plan_line

    path = tmp_path / "c.yaml"
    path.write_text(f"name: g\nstrategy: multi_worker_mirrored\nentrypoint: python -m worker\ntasks: {{worker: 2}}\n"
                    f"restart: {restart}\n")
    spec = parse_spec(path.read_text(), str(path))
    line = plan_line(spec, plan_for(spec).tasks)
    assert line.startswith("warm standby: off")
    assert ("still forked from their host's zygote" in line) is zygote, line
