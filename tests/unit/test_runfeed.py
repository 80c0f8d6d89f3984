"""launcher/runfeed.py: a RunView fed from a run record on disk, replayed and then followed,
with each attempt's lines on the right side of its start event."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.runfeed import RecordDamaged, RecordFeed, replay
from launcher.runview import RunView

T0 = 1_000_000.0


class Record:
    """A run dir written the way launcher/rundir.py writes it, one append at a time."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "run"
        (self.dir / "logs").mkdir(parents=True)
        (self.dir / "events.jsonl").write_text("")

    def event(self, kind: str, at: float, **fields) -> None:
        with open(self.dir / "events.jsonl", "a") as fh:
            fh.write(json.dumps({"time": at, "event": kind, **fields}) + "\n")

    def log(self, key: str, *lines: str) -> None:
        with open(self.log_path(key), "a") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def log_path(self, key: str) -> Path:
        return self.dir / "logs" / (key.replace(":", "-") + ".log")

    def size(self, key: str) -> int:
        path = self.log_path(key)
        return path.stat().st_size if path.exists() else 0

    def start(self, key: str, attempt: int, at: float) -> None:
        self.event("start", at, task=key, attempt=attempt, host="h", log_offset=self.size(key))


START = "tfcluster-start epoch=0 step={g} global_step={g} global_batch=32 epochs=3 steps_per_epoch=10"
STEP = "tfcluster-step epoch={e} step={s} global_step={g} loss=0.5 accuracy=0.75 time={t}"


def test_follow_applies_appended_events_and_lines_and_holds_the_next_attempts_lines_until_its_start(tmp_path):
    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0"], max_restarts=1)
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), STEP.format(e=0, s=4, g=4, t=T0 + 2), STEP.format(e=0, s=8, g=8, t=T0 + 3))
    view = RunView()
    feed = RecordFeed(rec.dir, view, clock=lambda: T0 + 100)
    assert feed.poll() == 2
    w = view.tasks["worker:0"]
    assert (w.state, w.epoch, w.step, w.global_step, w.examples_per_sec) == ("training", 1, 8, 8, 4 * 32 / 1.0)
    assert feed.poll() == 0 and w.global_step == 8  # nothing new, nothing fed twice

    rec.event("exit", T0 + 4, task="worker:0", attempt=0, code=137)
    rec.event("restart", T0 + 5, attempt=1)
    feed.poll()
    # A line the old process's reader passed on late, then the restarted process prints before
    # the supervisor writes its start event:
    rec.log("worker:0", "late line of attempt 1")
    offset = rec.size("worker:0")
    rec.log("worker:0", START.format(g=8))
    feed.poll()
    # held until the start event says where the new attempt begins
    assert (w.state, w.global_step, w.last_line) == ("restarting", 8, STEP.format(e=0, s=8, g=8, t=T0 + 3))
    rec.event("start", T0 + 6, task="worker:0", attempt=1, host="h", log_offset=offset)
    rec.log("worker:0", STEP.format(e=0, s=10, g=10, t=T0 + 7))
    with open(rec.log_path("worker:0"), "a") as fh:
        fh.write("half a line")  # not fed until its newline
    feed.poll()
    # the new attempt's start line came after its start event: it counts its steps from 8
    assert (w.state, w.attempt, w.starts, w.start_global_step, w.steps_this_attempt()) == ("training", 2, 2, 8, 2)
    assert w.last_line.startswith("tfcluster-step") and not feed.ended
    rec.log("worker:0", " written")
    rec.event("outcome", T0 + 8, outcome="succeeded", exit_code=0)
    feed.poll()
    assert feed.ended and view.outcome == "succeeded" and w.last_line == "half a line written"


def test_replay_skips_standby_lines_stamps_lines_with_the_logs_time_and_waits_for_a_torn_event(tmp_path):
    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0", "worker:1"])
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), STEP.format(e=1, s=3, g=13, t=T0 + 2),
            "(standby) " + STEP.format(e=2, s=9, g=29, t=T0 + 3))
    os.utime(rec.log_path("worker:0"), (T0 + 50, T0 + 50))
    with open(rec.dir / "events.jsonl", "a") as fh:
        fh.write('{"time": 1, "event": "ex')  # a write in progress
    feed = RecordFeed(rec.dir, view := RunView(), clock=lambda: T0 + 100)
    feed.poll()
    w0 = view.tasks["worker:0"]
    assert (w0.epoch, w0.step, w0.global_step, w0.last_line_at) == (2, 3, 13, T0 + 50)
    assert view.tasks["worker:1"].state == "pending"
    with open(rec.dir / "events.jsonl", "a") as fh:
        fh.write('it", "task": "worker:0", "code": 0}\n')
    feed.poll()
    assert w0.state == "succeeded"
    assert replay(rec.dir).tasks["worker:0"].state == "succeeded"


def test_a_damaged_event_line_is_named(tmp_path):
    rec = Record(tmp_path)
    rec.event("run_start", T0)
    with open(rec.dir / "events.jsonl", "a") as fh:
        fh.write("not json\n")
    with pytest.raises(RecordDamaged, match=r"events\.jsonl line 2 is not an event"):
        replay(rec.dir)


def test_a_log_read_in_small_chunks_replays_the_same_and_stops_at_the_next_attempts_offset(tmp_path, monkeypatch):
    """Logs are read CHUNK bytes at a time (memory does not grow with the log): a line the
    chunk cuts, one longer than a chunk and a character whose bytes a chunk splits come out
    whole; an attempt's lines still stop at the next start's log_offset."""
    import launcher.runfeed as runfeed

    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0"])
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), *[STEP.format(e=0, s=i, g=i, t=T0 + i) for i in range(1, 9)],
            "x" * 300, "naïve ünïcödé " * 9)
    rec.event("exit", T0 + 10, task="worker:0", code=1)
    rec.start("worker:0", 1, T0 + 11)
    rec.log("worker:0", START.format(g=5), STEP.format(e=0, s=7, g=7, t=T0 + 12))

    def snapshot(view):
        t = view.tasks["worker:0"]
        return (t.state, t.global_step, t.start_global_step, t.last_line, t.examples_per_sec, t.starts)

    whole = replay(rec.dir)
    seen: list[str] = []
    monkeypatch.setattr(runfeed, "CHUNK", 7)
    original = RunView.lines
    monkeypatch.setattr(RunView, "lines", lambda self, key, texts, now: (seen.extend(texts),
                                                                         original(self, key, texts, now)))
    chunked = replay(rec.dir)
    assert snapshot(chunked) == snapshot(whole) == ("training", 7, 5, STEP.format(e=0, s=7, g=7, t=T0 + 12),
                                                    None, 2)
    assert "x" * 300 in seen and ("naïve ünïcödé " * 9).strip() in [s.strip() for s in seen]
    assert seen[-2:] == [START.format(g=5), STEP.format(e=0, s=7, g=7, t=T0 + 12)]
    assert seen.index(START.format(g=5)) == seen.index("x" * 300) + 2  # attempt 1's lines after attempt 0's
