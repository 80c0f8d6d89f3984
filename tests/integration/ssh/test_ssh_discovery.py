"""Host discovery during a run, on the ssh lab: the command is `cat` of a file the test
edits. A host that appears becomes usable once it answers for elastic.settle s; garbage output
changes nothing and is said in one line; a host of the plan that vanishes from the list has its
task moved (the group stopped gracefully first). The tasks are stand-ins (tests/support/
group_task.py): the graceful stop's agreed save and 0 steps redone are the reference worker's, in
test_ssh_elastic.py's shrink and grow; the decisions on each answer are
tests/unit/supervise/test_membership.py's."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.ssh_helpers import group_task
from tests.support.tfrun import run_and_act
from tests.support.waits import wait_for

from .conftest import task_processes
import launcher.record.events as ev
from tests.support.records import read_records

pytestmark = [pytest.mark.integration, pytest.mark.ssh]


def test_discovery_adds_a_host_ignores_garbage_and_moves_the_task_of_a_host_that_vanishes(lab, make_spec, tmp_path):
    listing = tmp_path / "hosts.yaml"

    def publish(names):
        listing.write_text(yaml.safe_dump(lab.hosts_yaml(names)))

    publish(["h1", "h2"])
    out_dir = tmp_path / "out"
    spec = make_spec(
        group_task(out_dir, 2, hold=1),  # attempt 0 runs until stopped, attempt 1 ends
        hosts=[], restart={"max_restarts": 0},
        discovery={"command": f"cat {listing}", "every": 1, "timeout": 5},
        elastic={"host_wait": 3, "settle": 2}, watchdog={"startup_timeout": 120, "stop_grace": 15},
    )
    written = yaml.safe_load(spec.read_text())
    del written["hosts"]  # every host comes from the command
    spec.write_text(yaml.safe_dump(written, sort_keys=False))
    code, out = run_and_act(spec, [
        (r"\[worker:1\] group of 2 attempt 0", lambda _p: publish(["h1", "h2", "h3"])),
        (r"h3 answers again", lambda _p: listing.write_text("{{{ not yaml\n")),
        (r"discovery\.command: .*keeping the last good host list", lambda _p: publish(["h1", "h3"])),
    ], timeout=240)
    assert code == 0, out[-6000:]
    assert "discovery: h3 found (usable once it answers for elastic.settle=2 s)" in out, out[-4000:]
    garbage = [line for line in out.splitlines() if "keeping the last good host list" in line]
    assert len(garbage) == 1 and "the run goes on" in garbage[0], garbage  # once, however often it runs
    assert "discovery: h2 gone from the list" in out
    assert "h2 lost (gone from discovery.command's list); worker:1 moved to h3" in out, out[-4000:]
    assert "moving worker:1: stopping the group gracefully" in out, out[-4000:]
    found = {p.name: p.read_text() for p in out_dir.iterdir()}
    assert found == {"0-2-worker-0": "h1", "0-2-worker-1": "h2", "1-2-worker-0": "h1", "1-2-worker-1": "h3"}, found
    run = spec.parent / "runs" / "sshtest" / "latest"
    assert [t["host"] for t in json.loads((run / "plan.json").read_text())["tasks"]] == ["h1", "h2"]
    assert [t["host"] for t in json.loads((run / "plan-2.json").read_text())["tasks"]] == ["h1", "h3"]
    recorded = read_records(run)
    found = [(e["ok"], e.get("added"), e.get("gone")) for e in recorded if isinstance(e, ev.DiscoveryAnswer)]
    assert found == [(True, ["h3"], []), (False, None, None), (True, [], ["h2"])], found
    assert not [e for e in recorded if isinstance(e, (ev.GroupRestart, ev.Failure))]  # no failure: a membership change
    wait_for(lambda: not any(task_processes(lab).values()), 20, what=f"no task left: {task_processes(lab)}")
