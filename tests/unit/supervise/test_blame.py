"""Failure blame (launcher/supervise/blame.py), pure functions of data: peers' states, the root cause
of an exit and its consequences (the report's lines: tests/unit/ui/test_eventlines.py)."""

from __future__ import annotations

from launcher.supervise.blame import Fault, blame_exit, peer_notes

ABORTED = "Collective ops is aborted by: task /job:worker/replica:0/task:1 stopped sending heartbeats"


def test_peer_notes_say_dead_stopped_and_hung_peers_and_skip_the_evaluator():
    notes = {"worker:1": "process is stopped (SIGSTOP?)", "worker:2": "", "worker:3": "", "evaluator:0": "x"}
    got = peer_notes("worker:0", ["worker:0", "worker:1", "worker:2", "worker:3", "worker:4", "evaluator:0"],
                     {"worker:4": 137, "worker:3": 0}, notes.__getitem__, now=100.0, since=50.0,
                     activity={"worker:1": 99.0, "worker:2": 60.0}, hang_timeout=30.0,
                     strategy="multi_worker_mirrored")
    assert got == {"worker:1": "process is stopped (SIGSTOP?)", "worker:2": "hung: no progress for 40 s",
                   "worker:3": "", "worker:4": got["worker:4"]}
    assert got["worker:4"]  # describe_exit(137)


def test_before_every_task_is_ready_silence_is_not_a_hang():
    got = peer_notes("worker:0", ["worker:0", "worker:1"], {}, lambda k: "", now=100.0, since=None,
                     activity={"worker:1": 0.0}, hang_timeout=30.0, strategy="multi_worker_mirrored")
    assert got == {"worker:1": ""}


def test_an_abort_caused_by_a_stopped_peer_blames_the_peer_and_lists_the_consequences():
    exits = {"worker:0": 1, "worker:2": 1, "worker:3": 1}
    tails = {"worker:0": [ABORTED], "worker:2": [ABORTED], "worker:3": ["ValueError: bad input"]}
    notes = {"worker:1": "process is stopped (SIGSTOP?)", "worker:2": "exit code 1", "worker:3": "exit code 1"}
    fault = blame_exit(("worker:0", "worker:2", "worker:3"), exits, tails, notes, lambda k: "")
    assert fault == Fault("worker:1", "process is stopped (SIGSTOP?)", None, others=("worker:3",),
                          consequences=(("worker:0", 1), ("worker:2", 1)))


def test_a_task_with_healthy_peers_is_its_own_root_cause_and_its_backends_note_wins():
    fault = blame_exit(("worker:0", "worker:1"), {"worker:0": 255, "worker:1": 1}, {"worker:0": ["boom"]},
                       {"worker:1": ""}, lambda k: "host2: no word for 16 s")
    assert fault == Fault("worker:0", "host2: no word for 16 s", 255, others=("worker:1",))
