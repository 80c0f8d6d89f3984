"""Host discovery during a run, on the ssh lab: the command is `cat` of a file the test
edits. A host that appears becomes usable once it answers for elastic.settle s; garbage output
changes nothing and is said in one line; a host of the plan that vanishes from the list has its
task moved (the group stopped gracefully first: 0 steps redone)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.tfrun import progress, run_and_act
from tests.support.waits import wait_for

from .conftest import PY
from .conftest import task_processes
from tests.support.ssh_helpers import private_state

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.tf]


def test_discovery_adds_a_host_ignores_garbage_and_moves_the_task_of_a_host_that_vanishes(lab, make_spec, tmp_path):
    listing = tmp_path / "hosts.yaml"

    def publish(names):
        listing.write_text(yaml.safe_dump(lab.hosts_yaml(names)))

    publish(["h1", "h2"])
    epochs, steps = 3, 20
    spec = make_spec(
        [PY, "-m", "worker", "--epochs", str(epochs), "--steps-per-epoch", str(steps), "--step-delay", "0.3",
         "--save-freq", "3", "--progress-every", "1"],
        hosts=[], env={"TF_CPP_MIN_LOG_LEVEL": "2"}, restart={"max_restarts": 0},
        discovery={"command": f"cat {listing}", "every": 1, "timeout": 5},
        elastic={"host_wait": 3, "settle": 2}, watchdog={"startup_timeout": 120, "stop_grace": 15},
        ssh={"require": ["tensorflow", "tf_keras"]}, state={"dir": private_state(lab, tmp_path)},
    )
    written = yaml.safe_load(spec.read_text())
    del written["hosts"]  # every host comes from the command
    spec.write_text(yaml.safe_dump(written, sort_keys=False))
    code, out = run_and_act(spec, [
        (r"\[worker:1\] tfcluster-step epoch=0 step=3 ", lambda _p: publish(["h1", "h2", "h3"])),
        (r"h3 answers again", lambda _p: listing.write_text("{{{ not yaml\n")),
        (r"discovery\.command: .*keeping the last good host list", lambda _p: publish(["h1", "h3"])),
    ], timeout=400)
    assert code == 0, out[-6000:]
    assert "discovery: h3 found (usable once it answers for elastic.settle=2 s)" in out, out[-4000:]
    garbage = [line for line in out.splitlines() if "keeping the last good host list" in line]
    assert len(garbage) == 1 and "the run goes on" in garbage[0], garbage  # once, however often it runs
    assert "discovery: h2 gone from the list" in out
    assert "h2 lost (gone from discovery.command's list); worker:1 moved to h3" in out, out[-4000:]
    # Stopped gracefully: both workers saved the step they agreed on and resumed exactly there.
    saved = {int(p["global_step"]) for p in progress(out, "preempted", "worker:0")}
    w0, w1 = progress(out, "start", "worker:0"), progress(out, "start", "worker:1")
    assert len(saved) == 1 and int(w0[1]["global_step"]) == int(w1[1]["global_step"]) == min(saved), (saved, w0, w1)
    (res,) = progress(out, "result", "worker:0")
    assert int(res["steps_run"]) == epochs * steps - min(saved), res
    run = spec.parent / "runs" / "sshtest" / "latest"
    assert [t["host"] for t in json.loads((run / "plan.json").read_text())["tasks"]] == ["h1", "h2"]
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1", "h3"]
    recorded = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    found = [(e["ok"], e.get("added"), e.get("gone")) for e in recorded if e["event"] == "discovery"]
    assert found == [(True, ["h3"], []), (False, None, None), (True, [], ["h2"])], found
    assert not [e for e in recorded if e["event"] in ("restart", "failure")]  # no failure: a membership change
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")
