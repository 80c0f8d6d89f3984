"""The backend contract (launcher/backends/base.py: the kind, its Hosts and Tasks), run against
every registered backend on the real thing: local processes, the ssh lab's sshd hosts, the
private Docker engine.

Each task runs a small Python program (no TensorFlow) whose behaviour -- print, exit with a code,
die of a signal, trap a signal, ignore SIGTERM, listen on its port -- is given per task in the
CONTRACT environment variable, so one suite checks: placement, start, streamed output, the
environment a task gets, poll() exit codes (128+N for signal N), signal(), port_open(), stop()
(SIGTERM, grace, SIGKILL), a warm standby started and promoted from typed requests
(``StartRequest``), and down() from a run record (``TaskHandle.info()``'s ``to_json``).

Adding a backend: its name is taken from the registry, and the suite asks for a fixture named
``contract_<name>`` returning a ContractEnv (see the three below); put it in
tests/support/lab_fixtures.py (or import it there) and add the backend's marker to MARKS.
Without that fixture the backend's contract tests fail.
"""

from __future__ import annotations

import collections
import io
import json
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml

from launcher.backends import RecordedRun, backend_class, backend_names
from launcher.backends.base import BackendKind, ProcessInfo, StartRequest, TaskHandle
from launcher.ui.console import Console
from launcher.plan.build import build_plan, task_keys
from launcher.record.writer import RunRecord
from launcher.loader.load import load_spec
from tests.support.ports import free_base
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
MARKS = {"ssh": [pytest.mark.ssh], "docker": [pytest.mark.docker, pytest.mark.timeout(1500)],
         "slurm": [pytest.mark.slurm]}
pytestmark = [pytest.mark.integration]

# The task program: runs the CONTRACT actions listed for its TFCLUSTER_TASK, in order.
PROGRAM = r"""
import json, os, signal, socket, sys, time
me = os.environ["TFCLUSTER_TASK"]
def out(s):
    print(s, flush=True)
keep = []
for act in json.loads(os.environ["CONTRACT"]).get(me, []):
    op, _, arg = act.partition(":")
    if op == "print":
        out(arg)
    elif op == "env":
        out(arg + "=" + os.environ.get(arg, "<unset>"))
    elif op == "exit":
        sys.exit(int(arg))
    elif op == "kill":
        os.kill(os.getpid(), int(arg))
        time.sleep(30)
    elif op == "trap":
        name, _, code = arg.partition(":")
        def handler(n, f, name=name, code=code):
            out("got " + name)
            if code:
                os._exit(int(code))
        signal.signal(getattr(signal, "SIG" + name), handler)
    elif op == "ignore":
        signal.signal(getattr(signal, "SIG" + arg), signal.SIG_IGN)
    elif op == "hold":  # as a warm standby does: SIGUSR1 blocked until it waits for it
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    elif op == "promoted":  # wait for the promotion, then say what the promotion file gives ARG
        signal.sigwait({signal.SIGUSR1})
        path = os.environ.get("TFCLUSTER_STANDBY_ENV")
        if path:
            with open(path) as fh:
                out("promoted " + arg + "=" + str(json.load(fh).get(arg, "<unset>")))
        else:
            out("promoted without a file")
    elif op == "listen":
        tf = json.loads(os.environ["TF_CONFIG"])
        t = tf["task"]
        port = int(tf["cluster"][t["type"]][t["index"]].rsplit(":", 1)[1])
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen()
        keep.append(s)
    elif op == "sleep":
        end = time.time() + float(arg)
        while time.time() < end:
            time.sleep(0.1)
"""


@dataclass
class ContractEnv:
    """How to run the contract on one backend: the spec keys that select and configure it
    (``backend``, its options block, ``hosts``...), and the interpreter where tasks run."""

    spec: dict
    python: str = sys.executable
    # Seconds a task may take to start and print its first line (containers and remote shells
    # are slower than a local fork, more so on a loaded machine).
    start_timeout: float = 60.0


@pytest.fixture
def contract_local() -> ContractEnv:
    return ContractEnv(spec={"backend": "local", "workdir": str(ROOT)}, start_timeout=30)


@pytest.fixture
def contract_ssh(lab, tmp_path) -> ContractEnv:
    return ContractEnv(spec={
        "backend": "ssh",
        "hosts": lab.hosts_yaml(["h1", "h2"]),
        "ssh": {"known_hosts": str(lab.known_hosts), "python": sys.executable, "remote_dir": str(tmp_path / "remote"),
                "workdir": str(ROOT), "lease": 4, "connect_timeout": 3, "probe_timeout": 1.5, "require": []},
    })


@pytest.fixture
def contract_docker(docker_engine, worker_image) -> ContractEnv:
    return ContractEnv(spec={"backend": "docker", "docker": {"image": worker_image, "engine": docker_engine.url}},
                       python="python", start_timeout=120)


@pytest.fixture
def contract_slurm(slurm, monkeypatch) -> ContractEnv:
    problem = slurm.bridge_ok()
    assert problem is None, f"the slurm lab broke before this test: {problem}"
    slurm.cancel_all()
    for key, value in slurm.env().items():  # the backend runs in this process: SLURM_CONF
        monkeypatch.setenv(key, value)
    return ContractEnv(spec={"backend": "slurm", "workdir": str(ROOT),
                             "slurm": {"partition": "debug", "time": "10", "python": sys.executable,
                                       "queue_timeout": 30}})


@pytest.fixture(params=[pytest.param(name, marks=MARKS.get(name, [])) for name in backend_names()])
def env(request) -> ContractEnv:
    name = request.param
    try:
        return request.getfixturevalue(f"contract_{name}")
    except pytest.FixtureLookupError:
        pytest.fail(f"backend {name} has no contract environment: add a fixture contract_{name} "
                    "(see tests/integration/test_backend_contract.py)", pytrace=False)


class Run:
    """One run of the contract program on ``env``'s backend, driven through its two seams the
    way the supervisor drives them (from_spec, hosts.probe, hosts.allocate, tasks.start, poll,
    tasks.stop, close)."""

    def __init__(self, env: ContractEnv, tmp_path: Path, actions: dict[str, list[str]], stop_grace: float = 2.0):
        self.env = env
        spec = {
            "name": "contract",
            "strategy": "multi_worker_mirrored",
            "entrypoint": [env.python, "-c", PROGRAM],
            "tasks": {"worker": 2},
            "ports": {"base": free_base()},
            "env": {"CONTRACT": json.dumps(actions)},
            "watchdog": {"stop_grace": stop_grace},
            **env.spec,
        }
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        self.loaded = load_spec(path)
        self.cls: type[BackendKind] = backend_class(self.loaded.spec.backend)
        self.out, self.err = io.StringIO(), io.StringIO()
        self.console = Console(out=self.out, err=self.err, color=False)
        static = self.cls.place(self.loaded.spec)
        self.plan = build_plan(self.loaded.spec, static)
        self.record = RunRecord(tmp_path / "runs", self.plan, on_problem=self.console.error).create()
        self.backend = self.cls.from_spec(self.loaded, self.record, self.console)
        self.lines: dict[str, list[str]] = collections.defaultdict(list)
        self.lock = threading.Lock()
        self.handles: dict[str, TaskHandle] = {}
        try:
            report = self.backend.hosts.probe(self.plan)  # (it reports; the use case's plans read it)
            assert report is None or not (report.problems or report.absent), report
            self.placement = self.backend.hosts.allocate(self.loaded.spec)
            self.static = static
            self.plan = build_plan(self.loaded.spec, self.placement)
            self.record.plan = self.plan
        except BaseException:
            self.close()
            raise

    def on_line(self, key: str, line: str) -> None:
        with self.lock:
            self.lines[key].append(line)

    def start(self, standby: tuple[str, ...] = ()) -> dict[str, TaskHandle]:
        """Every task started (those of ``standby`` as warm standbys), as the supervisor asks."""
        for task in self.plan.tasks:
            self.handles[task.key] = self.backend.tasks.start(
                StartRequest(task, self.told(0), standby=task.key in standby), self.on_line)
        return self.handles

    def told(self, attempt: int) -> dict[str, str]:
        """What the supervisor adds to the plan's environment for attempt ``attempt``."""
        return {"TFCLUSTER_RESTART_COUNT": str(attempt), "TFCLUSTER_RUN_ID": self.record.run_id}

    def wait(self, what: str, predicate: Callable[[], object], timeout: float) -> None:
        wait_for(predicate, timeout, 0.05, what=f"{self.cls.name}: {what}",
                 detail=lambda: f"output: {dict(self.lines)}; console: {self.err.getvalue()[-2000:]}")

    def wait_line(self, key: str, text: str, timeout: Optional[float] = None) -> None:
        self.wait(f"{key} printing {text!r}", lambda: text in self.lines_of(key), timeout or self.env.start_timeout)

    def wait_exit(self, key: str, timeout: Optional[float] = None) -> int:
        handle = self.handles[key]
        self.wait(f"{key} exiting", lambda: handle.poll() is not None, timeout or self.env.start_timeout)
        code = handle.poll()
        assert code is not None
        return code

    def lines_of(self, key: str) -> list[str]:
        with self.lock:
            return list(self.lines[key])

    def close(self) -> None:
        try:
            if self.handles:
                self.backend.tasks.stop(list(self.handles.values()), grace=0)
        finally:
            self.backend.close()
            self.record.close()


@pytest.fixture
def runs(tmp_path):
    made: list[Run] = []

    def make(env: ContractEnv, actions: dict[str, list[str]], **kw) -> Run:
        sub = tmp_path / f"run{len(made)}"
        sub.mkdir()
        made.append(Run(env, sub, actions, **kw))
        return made[-1]

    yield make
    for run in made:
        run.close()


READY_AND_WAIT = ["print:ready", "sleep:120"]


# ---------------------------------------------------------------- placement


def test_place_and_allocate_give_every_task_a_host(env, runs):
    run = runs(env, {})
    keys = {f"{t}:{i}" for t, i in task_keys(run.loaded.spec)}
    assert set(run.static.slots) == keys and set(run.placement.slots) == keys
    assert all(s.host and s.address for s in run.placement.slots.values())
    assert not run.placement.placeholder  # allocate() answers with the real hosts
    if run.cls.capabilities.static_placement:
        assert run.placement == run.static
    assert [t.key for t in run.plan.tasks] == ["worker:0", "worker:1"]


# ---------------------------------------------------------------- start, output, env, poll


def test_start_streams_output_passes_the_environment_and_reports_exit_codes(env, runs):
    run = runs(env, {"worker:0": ["print:hello from 0", "env:TFCLUSTER_RESTART_COUNT", "env:TF_CONFIG", "exit:0"],
                     "worker:1": ["print:hello from 1", "env:TFCLUSTER_TASK", "env:TFCLUSTER_STANDBY", "exit:3"]})
    run.start()
    assert run.wait_exit("worker:0") == 0
    assert run.wait_exit("worker:1") == 3
    run.wait_line("worker:1", "TFCLUSTER_TASK=worker:1")
    zero = run.lines_of("worker:0")
    assert "hello from 0" in zero and "TFCLUSTER_RESTART_COUNT=0" in zero
    tf_config = json.loads(next(x for x in zero if x.startswith("TF_CONFIG=")).split("=", 1)[1])
    assert tf_config == run.plan.task("worker:0").tf_config
    assert "hello from 1" in run.lines_of("worker:1")
    assert "TFCLUSTER_STANDBY=<unset>" in run.lines_of("worker:1")  # a cold start is told nothing of standbys
    assert all("hello from 0" not in line for line in run.lines_of("worker:1"))  # lines go to their own task


def test_a_task_killed_by_signal_n_exits_128_plus_n(env, runs):
    run = runs(env, {"worker:0": ["print:up", f"kill:{int(signal.SIGKILL)}"],
                     "worker:1": ["print:up", f"kill:{int(signal.SIGTERM)}"]})
    run.start()
    assert run.wait_exit("worker:0") == 128 + signal.SIGKILL
    assert run.wait_exit("worker:1") == 128 + signal.SIGTERM


# ---------------------------------------------------------------- signal, stop


def test_signal_reaches_the_task(env, runs):
    run = runs(env, {"worker:0": ["trap:USR1", "trap:TERM:7", *READY_AND_WAIT], "worker:1": ["exit:0"]})
    handles = run.start()
    run.wait_line("worker:0", "ready")
    handles["worker:0"].signal(signal.SIGUSR1)
    run.wait_line("worker:0", "got USR1", timeout=20)
    assert handles["worker:0"].poll() is None  # a trapped signal does not end the task
    handles["worker:0"].signal(signal.SIGTERM)
    run.wait_line("worker:0", "got TERM", timeout=20)
    assert run.wait_exit("worker:0", timeout=20) == 7


def test_a_standby_is_told_so_and_promoted_with_the_cold_starts_environment(env, runs):
    """A start whose request says ``standby`` tells the task so (TFCLUSTER_STANDBY=1 and, where the
    backend keeps one, its promotion file in TFCLUSTER_STANDBY_ENV), and ``promote`` with the
    request of the cold start it stands for writes that start's environment there, then sends
    SIGUSR1; a cold start beside it is told neither. The flags travel in the request: the
    supervisor's environment holds none of them."""
    if not env_capable(env, "warm_standby"):
        pytest.skip("this backend keeps no standby")
    wait = ["env:TFCLUSTER_STANDBY", "env:TFCLUSTER_STANDBY_ENV", "print:ready"]
    run = runs(env, {"worker:0": ["hold", *wait, "promoted:TFCLUSTER_RESTART_COUNT", "exit:0"],
                     "worker:1": [*wait, "sleep:120"]})
    handles = run.start(standby=("worker:0",))
    run.wait_line("worker:0", "ready")
    run.wait_line("worker:1", "ready")
    assert "TFCLUSTER_STANDBY=1" in run.lines_of("worker:0")
    assert {"TFCLUSTER_STANDBY=<unset>", "TFCLUSTER_STANDBY_ENV=<unset>"} <= set(run.lines_of("worker:1"))
    named = next(x for x in run.lines_of("worker:0") if x.startswith("TFCLUSTER_STANDBY_ENV=")).split("=", 1)[1]
    run.backend.tasks.promote(handles["worker:0"], StartRequest(run.plan.task("worker:0"), run.told(1)))
    # (docker keeps no file where the container's user is a name: the standby keeps its environment)
    run.wait_line("worker:0", "promoted TFCLUSTER_RESTART_COUNT=1" if named != "<unset>" else "promoted without a file",
                  timeout=30)
    assert run.wait_exit("worker:0", timeout=30) == 0


def env_capable(env: ContractEnv, capability: str) -> bool:
    return bool(getattr(backend_class(env.spec["backend"]).capabilities, capability))


def test_stop_sends_sigterm_then_sigkill_after_the_grace(env, runs):
    run = runs(env, {"worker:0": ["trap:TERM:0", *READY_AND_WAIT], "worker:1": ["ignore:TERM", *READY_AND_WAIT]})
    handles = run.start()
    run.wait_line("worker:0", "ready")
    run.wait_line("worker:1", "ready")
    started = time.monotonic()
    left = run.backend.tasks.stop(list(handles.values()), grace=2.0)
    took = time.monotonic() - started
    assert left == []
    assert "got TERM" in run.lines_of("worker:0")
    assert handles["worker:0"].poll() == 0  # saved and exited within the grace
    assert handles["worker:1"].poll() == 128 + signal.SIGKILL  # ignored SIGTERM: killed after it
    assert took >= 1.5, took


def test_stop_with_no_grace_kills_at_once(env, runs):
    run = runs(env, {"worker:0": ["trap:TERM:0", *READY_AND_WAIT], "worker:1": READY_AND_WAIT})
    handles = run.start()
    run.wait_line("worker:0", "ready")
    run.wait_line("worker:1", "ready")
    assert run.backend.tasks.stop(list(handles.values()), grace=0) == []
    assert [h.poll() for h in handles.values()] == [128 + signal.SIGKILL] * 2
    assert "got TERM" not in run.lines_of("worker:0")


# ---------------------------------------------------------------- port_open


def test_port_open_tells_a_listening_task_from_a_silent_one(env, runs):
    run = runs(env, {"worker:0": ["listen", *READY_AND_WAIT], "worker:1": READY_AND_WAIT})
    run.start()
    run.wait_line("worker:0", "ready")
    run.wait_line("worker:1", "ready")
    zero, one = run.plan.task("worker:0"), run.plan.task("worker:1")
    if not run.cls.capabilities.port_probe:
        assert run.backend.tasks.port_open(zero) is True  # no probe: the contract's default answer
        return
    run.wait("worker:0's port open", lambda: run.backend.tasks.port_open(zero), 20)
    assert run.backend.tasks.port_open(one) is False


# ---------------------------------------------------------------- down


def test_down_stops_what_a_run_left_from_its_record(env, runs):
    """A launcher that died (here: never closed) left tasks running; a fresh backend, built for
    ``tfcluster down`` from the spec alone, stops them from the ids the record keeps."""
    run = runs(env, {"worker:0": READY_AND_WAIT, "worker:1": READY_AND_WAIT})
    handles = run.start()
    run.wait_line("worker:0", "ready")
    run.wait_line("worker:1", "ready")
    infos = {k: h.info() for k, h in handles.items()}
    assert all(isinstance(i, ProcessInfo) for i in infos.values()), infos
    # What launcher.json keeps of each task (the record's shape, JSON), read back by a fresh backend.
    recorded = RecordedRun(run.record.dir, {"run_id": run.record.run_id, "pid": 0,
                                            "tasks": json.loads(json.dumps({k: i.to_json() for k, i in infos.items()}))})
    console = Console(out=io.StringIO(), err=io.StringIO(), color=False)
    other = run.cls.from_spec(run.loaded, None, console)
    try:
        assert other.hosts.down(recorded, console) is True
    finally:
        other.close()
    run.wait("every task gone", lambda: all(h.poll() is not None for h in handles.values()), 30)
    again = run.cls.from_spec(run.loaded, None, console)
    try:
        assert again.hosts.down(recorded, console) is False  # nothing left to stop
    finally:
        again.close()
