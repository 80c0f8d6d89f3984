"""The Backend seam: the registry, backend-owned options blocks and rules, and the
spec -> place/allocate -> plan -> start flow, with a registered test backend ("queue") that,
like a workload manager, knows its nodes only after allocating them."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from pydantic import Field

from launcher.backends import REGISTRY, Capabilities, backend_class, backend_classes, backend_names
from launcher.backends.base import Backend
from launcher.backends.local import LocalBackend, LocalHosts
from launcher.cli.main import main
from launcher.errors import SpecError
from launcher.app.up import plan_for
from launcher.plan.build import Placement, Slot, task_keys
from launcher.loader.load import parse_spec
from launcher.spec.model import OptionsModel
from tests.support.ports import free_base
from tests.support.specs import script_spec

HERE = f"{__name__}:QueueBackend"


class QueueOptions(OptionsModel):
    partition: str  # required: the block cannot default
    nodes: int = Field(default=1, ge=1, strict=True)


class QueueBackend(LocalBackend):
    """Runs tasks locally, but pretends to be a queue: placeholders until allocate()."""

    name = "queue"
    options_key = "queue"
    Options = QueueOptions
    capabilities = Capabilities(port_preflight=True, port_probe=True, static_placement=False)
    allocations: list[str] = []
    closed: list[bool] = []

    @classmethod
    def place(cls, spec):
        return Placement({f"{t}:{i}": Slot(f"node-{n}?", f"node-{n}?") for n, (t, i) in enumerate(task_keys(spec))},
                         placeholder=True, note="queue assigns nodes when the job starts")

    @classmethod
    def check_spec(cls, spec):
        if spec.queue is None:
            return [(("backend",), "backend queue needs a queue: block with partition; add queue: {partition: p}")]
        tasks = len(task_keys(spec))
        if spec.queue.nodes > tasks:
            return [(("queue", "nodes"), f"{spec.queue.nodes} nodes for {tasks} tasks; ask for at most {tasks}")]
        return []

    @classmethod
    def from_spec(cls, loaded, record=None, console=None):
        local = super().from_spec(loaded, record, console)
        return Backend(cls, QueueHosts(local.hosts.run, record), local.tasks)


class QueueHosts(LocalHosts):
    """This machine's checks, and an allocation as a workload manager's: recorded, interruptible."""

    def __init__(self, run, record) -> None:
        super().__init__(run)
        self.record = record

    def allocate(self, spec):
        QueueBackend.allocations.append(spec.queue.partition)
        self.record.allocated(job=f"job-{spec.queue.partition}")
        if spec.queue.partition == "stuck":  # queued until `tfcluster down` sends SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
            raise AssertionError("SIGTERM did not interrupt allocate()")
        return Placement({f"{t}:{i}": Slot("localhost", "127.0.0.1") for t, i in task_keys(spec)})

    def close(self):
        QueueBackend.closed.append(self.record is not None)
        super().close()


@pytest.fixture
def queue(monkeypatch):
    monkeypatch.setitem(REGISTRY, "queue", HERE)
    QueueBackend.allocations = []
    QueueBackend.closed = []
    return QueueBackend


BASE = """\
    name: t
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 2}
"""


def spec_text(extra: str) -> str:
    return textwrap.dedent(BASE) + textwrap.dedent(extra)


def errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse_spec(text, "c.yaml")
    return list(exc.value.lines)


# ---------------------------------------------------------------- the registry


def test_registry_names_its_classes_and_every_class_places_every_task():
    spec = parse_spec(spec_text("""\
        tasks: {chief: 1, worker: 2, ps: 1, evaluator: 1}
        strategy: parameter_server
        hosts: [{name: a, ssh: a}, {name: b, ssh: b}]
    """).replace("strategy: multi_worker_mirrored\n", "").replace("tasks: {worker: 2}\n", ""))
    assert set(backend_names()) >= {"local", "ssh", "docker"}
    for cls in backend_classes():
        assert backend_class(cls.name) is cls
        placement = cls.place(spec)
        assert sorted(placement.slots) == sorted(f"{t}:{i}" for t, i in task_keys(spec)), cls.name
        assert all(s.host and s.address for s in placement.slots.values()), cls.name
        assert placement.placeholder is not cls.capabilities.static_placement


def test_each_backend_options_block_is_a_spec_field_with_its_defaults():
    spec = parse_spec(spec_text(""))
    for cls in backend_classes():
        if cls.options_key:
            assert isinstance(getattr(spec, cls.options_key), cls.Options)
    assert spec.ssh.lease == 15.0 and spec.docker.image == "tfcluster-worker:latest"


# ---------------------------------------------------------------- a registered backend


def test_registered_backend_is_a_valid_choice_and_unknown_names_list_the_registry(queue):
    assert parse_spec(spec_text("backend: queue\nqueue: {partition: debug}\n")).queue.partition == "debug"
    (line,) = errors(spec_text("backend: slurmm\n"))
    assert line == "c.yaml:5: backend: 'slurmm' is not valid; use one of 'local', 'ssh', 'docker', 'slurm' or 'queue'"


def test_backend_options_block_errors_are_one_line_at_the_key(queue):
    assert errors(spec_text("backend: queue\nqueue:\n  nodes: 0\n  partitoin: x\n")) == [
        "c.yaml:6: queue.partition: required key is missing; add partition: ...",
        "c.yaml:7: queue.nodes: must be a whole number >= 1 (got 0)",
        "c.yaml:8: queue.partitoin: unknown key 'partitoin' (did you mean 'partition'?); valid keys: partition, nodes",
    ]


def test_backend_rules_and_capabilities_are_asked_not_special_cased(queue):
    assert errors(spec_text("backend: queue\n")) == [
        "c.yaml:5: backend: backend queue needs a queue: block with partition; add queue: {partition: p}"]
    assert errors(spec_text("backend: queue\nqueue: {partition: p, nodes: 3}\n")) == [
        "c.yaml:6: queue.nodes: 3 nodes for 2 tasks; ask for at most 2"]
    # warm_standby: true where the backend keeps no standby: not refused (plan says it is off).
    spec = parse_spec(spec_text("backend: queue\nqueue: {partition: p}\nrestart: {warm_standby: true}\n"), "c.yaml")
    assert spec.restart.warm_standby is True


def test_placeholder_plan_says_so(queue, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    base = free_base(2)  # the dry run's port preflight runs here: a port another process holds would fail it
    path.write_text(spec_text(f"backend: queue\nqueue: {{partition: p}}\nports: {{base: {base}}}\n"))
    plan = plan_for(parse_spec(path.read_text()))
    assert plan.placeholder and [t.endpoint for t in plan.tasks] == [f"node-0?:{base}", f"node-1?:{base}"]
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("placeholder placement: queue assigns nodes when the job starts; hosts, addresses and TF_CONFIG "
            "below are stand-ins") in out
    assert main(["plan", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["placeholder"] is True
    assert main(["up", str(path), "--dry-run"]) == 0
    assert "placeholder placement" in capsys.readouterr().out
    assert queue.allocations == []  # a dry run allocates nothing


def test_up_allocates_then_plans_on_the_allocated_hosts(queue, tmp_path):
    """The tasks' TF_CONFIG and the recorded plan carry the allocated addresses, not the
    placeholders: allocate runs once, before the plan the supervisor executes is built."""
    path = script_spec(tmp_path, "import os; print('tfc-seam', os.environ['TF_CONFIG'])",
                       extra="backend: queue\nqueue: {partition: gpu}\n")
    base = parse_spec(path.read_text()).ports.base
    assert main(["up", str(path), "--quiet"]) == 0
    assert queue.allocations == ["gpu"] and queue.closed == [True]
    run = Path(tmp_path / "runs" / "t" / "latest").resolve()
    assert json.loads((run / "launcher.json").read_text())["allocation"] == {"job": "job-gpu"}
    recorded = json.loads((run / "plan.json").read_text())
    assert recorded["placeholder"] is False
    assert [t["address"] for t in recorded["tasks"]] == ["127.0.0.1", "127.0.0.1"]
    line = next(x for x in (run / "logs" / "worker-1.log").read_text().splitlines() if "tfc-seam" in x)
    tf_config = json.loads(line.split("tfc-seam ", 1)[1])
    assert tf_config == {"cluster": {"worker": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]},
                         "task": {"type": "worker", "index": 1}}


def test_a_stop_signal_while_allocating_releases_the_allocation(queue, tmp_path, capsys):
    """`tfcluster down` (SIGTERM) while the job is queued: allocate() is interrupted, close()
    runs (a workload manager's job is cancelled there), the record already names the job."""
    path = script_spec(tmp_path, "print('never started')", extra="backend: queue\nqueue: {partition: stuck}\n")
    assert main(["up", str(path), "--quiet"]) == 130
    assert queue.allocations == ["stuck"] and queue.closed == [True]
    assert "interrupted" in capsys.readouterr().err
    run = Path(tmp_path / "runs" / "t" / "latest").resolve()
    assert json.loads((run / "launcher.json").read_text())["allocation"] == {"job": "job-stuck"}
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler was put back
