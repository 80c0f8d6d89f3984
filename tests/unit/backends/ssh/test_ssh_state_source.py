"""launcher/backends/ssh/state.py StateSync.source: where the latest backup is copied from before an
attempt, with hosts that come and go (no network: the pool is a fake). The newest backup is on the
last attempt's chief host; a host that just joined (a spare, a returned host) never is the source
merely because the new plan put worker:0 there."""

from __future__ import annotations

import textwrap

from launcher.backends.ssh.options import SSHOptions
from launcher.backends.ssh.state import StateSync
from launcher.plan.elastic import replace_lost
from launcher.app.up import plan_for
from launcher.loader.load import parse_spec

SPEC = parse_spec(textwrap.dedent("""\
    name: s
    strategy: multi_worker_mirrored
    backend: ssh
    entrypoint: python -m worker
    hosts: [{name: h1}, {name: h2}, {name: h3}, {name: h4}]
    tasks: {worker: {count: 3, min: 1}}
"""))


class FakePool:
    def __init__(self, names, dead=(), lost=()):
        self.hosts = {n: object() for n in names}
        self.opts = SSHOptions()
        self.dead, self.lost, self.connects = set(dead), set(lost), []

    def connect(self, names):
        self.connects.append(list(names))
        return {n: "no answer" for n in names if n in self.dead}

    def is_lost(self, name):
        return name in self.lost


def sync(pool) -> StateSync:
    s = StateSync(pool, SPEC.state, console=None, record=None, run_id="r")
    s.mode = "copy"
    return s


def test_first_attempt_copies_from_the_chief():
    s = sync(FakePool(["h1", "h2", "h3", "h4"]))
    s.use(plan_for(SPEC))
    assert s.chief_host() == "h1" and s.source() == "h1"


def test_after_the_chiefs_host_is_lost_the_source_is_a_host_of_the_last_group_not_the_spare():
    pool = FakePool(["h1", "h2", "h3", "h4"], lost={"h1"})
    s = sync(pool)
    plan = plan_for(SPEC)
    s.use(plan)
    s.writer, s.last_group = "h1", ["h1", "h2", "h3"]  # what attempt 0 left
    moved = replace_lost(SPEC, plan, ["h1"])
    s.use(moved.plan)
    assert s.chief_host() == "h4"  # worker:0 moved to the spare, which holds no backup
    assert s.source() == "h2"
    assert ["h1"] not in pool.connects  # a host known lost is not tried (its link may be down)


def test_after_a_shrink_the_last_chief_host_stays_the_source_while_it_answers():
    s = sync(FakePool(["h1", "h2", "h3", "h4"]))
    plan = plan_for(SPEC)
    s.use(plan)
    s.writer, s.last_group = "h1", ["h1", "h2", "h3"]
    shrunk = replace_lost(SPEC.model_copy(update={"hosts": SPEC.hosts[:3]}), plan, ["h2"])
    s.use(shrunk.plan)
    assert s.source() == "h1"


def test_a_writer_that_does_not_answer_falls_back_to_the_new_chief_if_it_was_in_the_group():
    pool = FakePool(["h1", "h2", "h3", "h4"], dead={"h9"})
    s = sync(pool)
    s.use(plan_for(SPEC))
    s.writer, s.last_group = "h9", ["h9", "h1", "h2"]
    assert s.source() == "h1"
