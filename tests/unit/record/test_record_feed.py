"""launcher/record/feed.py: a RunModel fed from a run record on disk, replayed and then followed,
with each attempt's lines on the right side of its start event."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.record.feed import RecordDamaged, RecordFeed, replay
from launcher.record.view import RunModel

T0 = 1_000_000.0


class Record:
    """A run dir written the way launcher/record/writer.py writes it, one append at a time."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "run"
        (self.dir / "logs").mkdir(parents=True)
        (self.dir / "events.jsonl").write_text("")

    def event(self, kind: str, at: float, **fields) -> None:
        with open(self.dir / "events.jsonl", "a") as fh:
            fh.write(json.dumps({"time": at, "event": kind, **fields}) + "\n")

    def log(self, key: str, *lines: str) -> None:
        """Each line where the writer puts it: a record (what came on the task's control channel)
        in its progress file, any other line in its log."""
        for line in lines:
            with open(self.path(key, is_record(line)), "a") as fh:
                fh.write(line + "\n")

    def log_path(self, key: str) -> Path:
        return self.dir / "logs" / (key.replace(":", "-") + ".log")

    def progress_path(self, key: str) -> Path:
        return self.dir / "logs" / (key.replace(":", "-") + ".progress")

    def path(self, key: str, record: bool) -> Path:
        return self.progress_path(key) if record else self.log_path(key)

    def size(self, key: str, record: bool = False) -> int:
        path = self.path(key, record)
        return path.stat().st_size if path.exists() else 0

    def offsets(self, key: str) -> dict:
        return {"log_offset": self.size(key), "progress_offset": self.size(key, True)}

    def start(self, key: str, attempt: int, at: float) -> None:
        self.event("start", at, task=key, attempt=attempt, host="h", **self.offsets(key))


def is_record(line: str) -> bool:
    return line.startswith(("tfcluster-", "(standby) tfcluster-"))


START = "tfcluster-start epoch=0 step={g} global_step={g} global_batch=32 epochs=3 steps_per_epoch=10"
STEP = "tfcluster-step epoch={e} step={s} global_step={g} loss=0.5 accuracy=0.75 time={t}"


def test_follow_applies_appended_events_and_lines_and_holds_the_next_attempts_lines_until_its_start(tmp_path):
    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0"], max_restarts=1)
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), STEP.format(e=0, s=4, g=4, t=T0 + 2), STEP.format(e=0, s=8, g=8, t=T0 + 3))
    view = RunModel()
    feed = RecordFeed(rec.dir, view, clock=lambda: T0 + 100)
    assert feed.poll() == 2
    w = view.tasks["worker:0"]
    assert (w.shown, w.epoch, w.step, w.global_step, w.examples_per_sec) == ("training", 1, 8, 8, 4 * 32 / 1.0)
    assert feed.poll() == 0 and w.global_step == 8  # nothing new, nothing fed twice

    rec.event("exit", T0 + 4, task="worker:0", attempt=0, code=137)
    rec.event("restart", T0 + 5, attempt=1)
    feed.poll()
    # A line the old process's reader passed on late, then the restarted process prints before
    # the supervisor writes its start event:
    rec.log("worker:0", "late line of attempt 1")
    offset = rec.offsets("worker:0")
    rec.log("worker:0", START.format(g=8))
    feed.poll()
    # held until the start event says where the new attempt begins
    assert (w.state, w.global_step, w.last_line) == ("restarting", 8, "")
    rec.event("start", T0 + 6, task="worker:0", attempt=1, host="h", **offset)
    rec.log("worker:0", STEP.format(e=0, s=10, g=10, t=T0 + 7))
    with open(rec.log_path("worker:0"), "a") as fh:
        fh.write("half a line")  # not fed until its newline
    feed.poll()
    # the new attempt's start line came after its start event: it counts its steps from 8
    assert (w.shown, w.attempt, w.starts, w.start_global_step, w.steps_this_attempt()) == ("training", 1, 2, 8, 2)
    assert w.last_line == "" and not feed.ended  # (a record is no line of the task's)
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
    os.utime(rec.progress_path("worker:0"), (T0 + 50, T0 + 50))
    with open(rec.dir / "events.jsonl", "a") as fh:
        fh.write('{"time": 1, "event": "ex')  # a write in progress
    feed = RecordFeed(rec.dir, view := RunModel(), clock=lambda: T0 + 100)
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
    import launcher.record.feed as feed

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
        return (t.shown, t.global_step, t.start_global_step, t.last_line, t.examples_per_sec, t.starts)

    whole = replay(rec.dir)
    seen: list[str] = []  # the log's lines
    records: list[str] = []  # the progress file's
    monkeypatch.setattr(feed, "CHUNK", 7)
    for name, into in (("lines", seen), ("progress_lines", records)):
        original = getattr(RunModel, name)
        monkeypatch.setattr(RunModel, name, lambda self, key, texts, now, o=original, i=into: (i.extend(texts),
                                                                                               o(self, key, texts, now)))
    chunked = replay(rec.dir)
    assert snapshot(chunked) == snapshot(whole) == ("training", 7, 5, "", None, 2)
    assert seen[0] == "x" * 300 and seen[1].strip() == ("naïve ünïcödé " * 9).strip()
    assert records[-2:] == [START.format(g=5), STEP.format(e=0, s=7, g=7, t=T0 + 12)]
    assert records.index(START.format(g=5)) == records.index(STEP.format(e=0, s=8, g=8, t=T0 + 8)) + 1


# ------------------------------------------------------------------ snapshots


def _lines(rng, g: int, t: float, n: int) -> tuple[list[str], int, float]:
    """Lines a task prints: mostly the worker's step lines, with epoch, first-step, result and
    other lines, standby lines, and steps or clocks that go back."""
    out = []
    for _ in range(n):
        g += rng.choice((1, 1, 1, 2, 0, -2))
        t += rng.choice((0.1, 0.1, 0.25, 0.0, -1.0))
        roll = rng.random()
        if roll < 0.6:
            out.append(STEP.format(e=g // 10, s=g % 10, g=g, t=f"{t:.3f}"))
        elif roll < 0.68:
            out.append(f"tfcluster-step epoch={g // 10} step={g % 10} global_step={g} time={t:.3f}")
        elif roll < 0.74:
            out.append(f"tfcluster-epoch epoch={g // 10} global_step={g} loss=0.4 accuracy=0.8 time={t:.3f}")
        elif roll < 0.78:
            out.append(f"tfcluster-first_step epoch={g // 10} step={g % 10} global_step={g} time={t:.3f}")
        elif roll < 0.82:
            out.append(f"tfcluster-result accuracy=0.9 loss=0.2 examples_per_sec=99.0 steps_run={g}")
        elif roll < 0.86:
            out.append(f"tfcluster-worker_lost task=worker:1 time={t:.3f}")
        elif roll < 0.90:
            out.append("(standby) " + STEP.format(e=0, s=1, g=1, t="1.0"))
        elif roll < 0.95:
            out.append("W0000 some TensorFlow warning ünïcödé")
        else:
            out.append("")
    return out, g, t


def _record_a_run(rec: "Record", rng, at_points) -> None:
    """A random run in ``rec``: attempts of two workers (start events with their log offsets,
    ready, exits, stops, a worker restarted alone, group restarts), hosts lost and replanned,
    spares and a host back, lines written in pieces (a snapshot may fall inside a line), and
    at the end the outcome (or none: a run still going). ``at_points()`` is called between
    writes: where a snapshot may be taken."""
    keys = ["worker:0", "worker:1"]
    rec.event("run_start", T0, name="t", tasks=keys, max_restarts=3, spares=["h3"], backend="ssh")
    at, g = T0, {k: 0 for k in keys}
    clock = {k: T0 for k in keys}
    attempts = rng.randint(1, 3)
    for attempt in range(attempts):
        for key in keys:
            if rng.random() < 0.2:  # a line written before its start event (the next attempt's own)
                rec.log(key, "early line")
            at += 1
            rec.start(key, attempt, at)
            rec.log(key, START.format(g=g[key]) + f" time={clock[key]:.3f}")
            at_points()
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(keys)
            lines, g[key], clock[key] = _lines(rng, g[key], clock[key], rng.randint(0, 40))
            texts = {record: "".join(line + "\n" for line in lines if is_record(line) == record)
                     for record in (False, True)}
            cuts = {record: rng.randint(0, len(text)) for record, text in texts.items()}
            for record, text in texts.items():
                with open(rec.path(key, record), "a") as fh:
                    fh.write(text[:cuts[record]])
            at_points()  # (maybe mid-line)
            for record, text in texts.items():
                with open(rec.path(key, record), "a") as fh:
                    fh.write(text[cuts[record]:])
            roll = rng.random()
            at += 1
            if roll < 0.15:
                rec.event("ready", at, task=key, attempt=attempt)
            elif roll < 0.25:
                rec.event("attempt_ready", at, attempt=attempt)
            elif roll < 0.32:
                rec.event("exit", at, task=key, attempt=attempt, code=137)
                rec.event("task_restart", at, task=key, code=137, restart=1)
                rec.log(key, "a late line of the process that died")
                rec.start(key, attempt, at + 0.5)
            elif roll < 0.38:
                rec.event("host_lost", at, host="h2", how="unreachable for 60 s")
            at_points()
        if attempt < attempts - 1:
            at += 1
            rec.event("exit", at, task="worker:1", attempt=attempt, code=137)
            rec.event("failure", at, task="worker:1", attempt=attempt, reason="exit 137 (SIGKILL)", code=137)
            rec.event("stopped", at, task="worker:0", code=-9)
            rec.log("worker:1", "a line after its exit")
            at_points()
            if rng.random() < 0.5:
                rec.event("host_lost", at, host="h2", how="preempted")
                rec.event("replan", at, lost=["h2"], moved={"worker:1": {"from": "h2", "to": "h3"}}, tasks=keys)
                rec.event("host_added", at, host="h2")
            rec.event("restart", at + 0.5, attempt=attempt + 1)
            at_points()
    if rng.random() < 0.7:
        for key in keys:
            rec.log(key, f"tfcluster-result accuracy=0.91 loss=0.2 examples_per_sec=1280.0 steps_run={g[key]}")
            rec.event("exit", at + 1, task=key, attempt=attempts - 1, code=0)
        rec.event("outcome", at + 2, outcome="succeeded", exit_code=0, attempts=attempts)
    at_points()


def _comparable(view: RunModel) -> dict:
    """The view's state, but for a line's arrival stamp (``last_line_at``: the log's time for a
    replay, the time of the poll that read it for the supervisor's feed) and ``lost`` (one task's
    line about another, ``worker_lost task=...``, against that task's own start event: the record
    does not say which came first, and ``status`` does not show it)."""
    state = view.to_json()
    for t in state["tasks"].values():
        t.pop("last_line_at")
        t.pop("lost")
    return state


def test_a_replay_from_any_snapshot_gives_the_view_a_replay_from_the_start_gives(tmp_path):
    """Property: for random records, a snapshot written at random points (between an event and
    the next start, inside a line, between a restart's exit and its start, after the outcome)
    plus the record after it replays to the same view as the whole record, elastic fields
    (spares, host changes) included; and ``status`` (load_run) says the same."""
    import random
    import shutil

    from launcher.record.feed import SnapshotWriter, read_snapshot
    from launcher.record.status import load_run

    rng = random.Random(11)
    points = 0
    for trial in range(60):
        root = tmp_path / str(trial)
        rec = Record(root)
        (rec.dir / "plan.json").write_text(json.dumps({"name": "t", "backend": "ssh", "tasks": [
            {"type": "worker", "index": 0, "host": "h1"}, {"type": "worker", "index": 1, "host": "h2"}]}))
        (rec.dir / "launcher.json").write_text(json.dumps({"pid": os.getpid(), "host": None}))
        writer = SnapshotWriter(rec.dir)
        snapshots = []

        def at_points():
            if rng.random() < 0.5:
                writer.write()
                snapshots.append((rec.dir / "snapshot.json").read_text())

        _record_a_run(rec, rng, at_points)
        writer.close()  # the last one, as the supervisor writes it at the end
        snapshots.append((rec.dir / "snapshot.json").read_text())
        assert writer.problem == ""
        whole = replay(rec.dir, snapshot=False)
        status = load_run(rec.dir, alive=lambda *a: True).to_json()
        status.pop("elapsed"), status.pop("goodput")  # (both read the clock while the run runs)
        assert status["host_changes"] == [c.describe() for c in whole.host_changes]
        for text in snapshots:
            (rec.dir / "snapshot.json").write_text(text)
            assert read_snapshot(rec.dir) == json.loads(text)  # the snapshot fits the record: a replay starts from it
            a, b = _comparable(replay(rec.dir)), _comparable(whole)
            diff = {k: (t[k], b["tasks"][key][k]) for key, t in a["tasks"].items() for k in t if t[k] != b["tasks"][key][k]}
            assert a == b, (trial, json.loads(text)["fed"], diff)
            from_snapshot = load_run(rec.dir, alive=lambda *a: True).to_json()
            from_snapshot.pop("elapsed"), from_snapshot.pop("goodput")
            assert from_snapshot == status
            points += 1
        shutil.rmtree(root)
    assert points > 300


def test_a_record_without_a_snapshot_or_with_one_that_does_not_fit_is_replayed_from_its_start(tmp_path):
    from launcher.record.feed import SnapshotWriter

    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0"])
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), STEP.format(e=0, s=4, g=4, t=T0 + 2))
    assert replay(rec.dir).tasks["worker:0"].global_step == 4  # none: a record written before
    writer = SnapshotWriter(rec.dir)
    writer.close()
    good = (rec.dir / "snapshot.json").read_text()
    assert json.loads(good)["fed_progress"] == {"worker:0": rec.size("worker:0", True)}

    def after(text: str) -> int:
        (rec.dir / "snapshot.json").write_text(text)
        return replay(rec.dir).tasks["worker:0"].global_step

    rec.log("worker:0", STEP.format(e=0, s=6, g=6, t=T0 + 3))
    assert after(good) == 6
    state = json.loads(good)
    assert after("{not json") == 6
    assert after(json.dumps({**state, "version": 99})) == 6
    assert after(json.dumps({**state, "fed_progress": {"worker:0": 5}})) == 6  # not at a line's end
    assert after(json.dumps({**state, "view": {"tasks": {"worker:0": {"nonsense": 1}}}})) == 6
    # a log shorter than the snapshot says (replaced): from the start
    rec.progress_path("worker:0").write_text(START.format(g=2) + "\n")
    assert after(good) == 2


def test_status_and_attach_start_from_the_snapshot(tmp_path):
    """load_run (``status``) and ``RecordFeed.resume`` (``attach``) take the view from the
    snapshot and read only what came after it (a snapshot's view changed by hand shows)."""
    from launcher.record.feed import SnapshotWriter
    from launcher.record.status import load_run

    rec = Record(tmp_path)
    (rec.dir / "plan.json").write_text(json.dumps({"name": "t", "tasks": [{"type": "worker", "index": 0}]}))
    rec.event("run_start", T0, name="t", tasks=["worker:0"])
    rec.start("worker:0", 0, T0 + 1)
    rec.log("worker:0", START.format(g=0), STEP.format(e=0, s=4, g=4, t=T0 + 2))
    SnapshotWriter(rec.dir).close()
    state = json.loads((rec.dir / "snapshot.json").read_text())
    state["view"]["tasks"]["worker:0"]["epochs"] = 77
    state["view"]["tasks"]["worker:0"]["loss"] = 9.5
    (rec.dir / "snapshot.json").write_text(json.dumps(state))
    rec.log("worker:0", "a line after it")
    feed = RecordFeed.resume(rec.dir)
    feed.poll()
    w = feed.view.tasks["worker:0"]
    assert (w.epochs, w.loss, w.global_step, w.last_line) == (77, 9.5, 4, "a line after it")
    row = load_run(rec.dir, alive=lambda *a: True).tasks[0]
    assert (row.loss, row.global_step, row.last_line) == (9.5, 4, "a line after it")
    assert replay(rec.dir, snapshot=False).tasks["worker:0"].loss == 0.5


def test_the_supervisor_leaves_a_snapshot_of_the_whole_record(tmp_path):
    """A run (a group restart, then success) ends with snapshot.json covering all of events.jsonl
    and every task log, and status from it says what a replay from the start says."""
    from launcher.record.feed import read_snapshot
    from launcher.record.status import load_run
    from tests.support.fakes import Counter, Script, ScriptedTasks, scripted, supervise

    backend = scripted(ScriptedTasks({("worker:1", 0): Script(code=137, polls=2), ("worker:0", 0): Script(code=0, polls=50)},
                                     default=Script(code=0, polls=4)))
    spec = """\
        name: s
        strategy: multi_worker_mirrored
        entrypoint: python -m worker
        tasks: {worker: 2}
        restart: {max_restarts: 2}
        watchdog: {stop_grace: 0}
    """
    assert supervise(tmp_path, spec, backend, clock=Counter()).code == 0
    run = (tmp_path / "runs" / "s" / "latest").resolve()
    state = read_snapshot(run)
    assert state is not None and state["ended"]
    assert state["events_at"] == (run / "events.jsonl").stat().st_size
    assert state["fed_progress"] == {k: (run / "logs" / f"{k.replace(':', '-')}.progress").stat().st_size
                                     for k in ("worker:0", "worker:1")}  # (the scripted tasks say only records)
    assert _comparable(replay(run)) == _comparable(replay(run, snapshot=False))
    assert replay(run).tasks["worker:0"].starts == 2
    with_snapshot = load_run(run).to_json()
    (run / "snapshot.json").unlink()
    assert load_run(run).to_json() == with_snapshot


def test_snapshots_are_written_every_so_often_while_the_run_goes_on(tmp_path):
    import time

    from launcher.record.feed import SnapshotWriter, read_snapshot

    rec = Record(tmp_path)
    rec.event("run_start", T0, name="t", tasks=["worker:0"])
    rec.start("worker:0", 0, T0 + 1)
    writer = SnapshotWriter(rec.dir, every=0.01).start()
    rec.log("worker:0", START.format(g=0), STEP.format(e=0, s=4, g=4, t=T0 + 2))
    deadline = time.monotonic() + 10
    while (read_snapshot(rec.dir) or {}).get("fed", {}).get("worker:0") != rec.size("worker:0"):
        assert time.monotonic() < deadline, "no snapshot covering the log"
        time.sleep(0.01)
    writer.close()
    assert not list(rec.dir.glob(".snapshot.json.*"))  # no temporary file left
