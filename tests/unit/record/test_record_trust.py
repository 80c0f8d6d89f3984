"""A run record is data, not orders: whatever its files hold, the one reader gives typed events or
one ``run record damaged: ...`` line (never another exception); JSON output is strict JSON; and
``tfcluster down`` signals only a process it has proven to be the run's own (real processes: a
``sleep`` of someone else's that a tampered launcher.json names stays alive)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli.main import main
from launcher.contract import envnames
from launcher.system.procinfo import cmdline, start_time
from launcher.record import events as ev
from launcher.record.reader import parse_events, read_events, read_launcher
from launcher.record.status import RecordDamaged, load_run
from launcher.ui.jsontext import json_text

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                  st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4)), max_leaves=12)
FIELD_NAMES = sorted({f for cls in ev.KINDS.values() for f in cls.__dataclass_fields__} | {"pid", "pgid", "x"})
EVENT_LINES = st.builds(lambda kind, fields, at: {"event": kind, **fields, **({"time": at} if at is not None else {})},
                        st.sampled_from(sorted(ev.KINDS) + ["future_kind"]),
                        st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=6),
                        st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3)))


def _one_line(exc: RecordDamaged) -> str:
    (line,) = exc.lines
    assert line.startswith("run record damaged: ") and "\n" not in line and len(line) <= 600, line
    return line


@SETTINGS
@given(EVENT_LINES)
def test_any_event_shaped_json_is_a_typed_event_or_one_damaged_line(line):
    try:
        event = ev.parse_event(line, "line 1")
    except ev.RunRecordDamaged as exc:
        _one_line(exc)
        return
    assert isinstance(event, ev.RecordEvent) and event.kind == line["event"]
    # what was read holds only finite numbers, and reads back as itself
    text = json.dumps(event.to_json(), allow_nan=False)
    assert ev.parse_event(json.loads(text)).to_json() == event.to_json()


@SETTINGS
@given(st.lists(st.one_of(st.binary(max_size=80), EVENT_LINES.map(lambda d: json.dumps(d).encode()),
                          JSON_VALUES.map(lambda d: json.dumps(d).encode())), max_size=6))
def test_any_bytes_in_events_jsonl_read_as_events_or_one_damaged_line(tmp_path_factory, lines):
    run = tmp_path_factory.mktemp("rec")
    (run / "events.jsonl").write_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    assert all(isinstance(e, ev.RecordEvent) for e in read_events(run))  # lenient: damaged lines skipped
    try:
        events = read_events(run, strict=True)
    except RecordDamaged as exc:
        assert "events.jsonl line " in _one_line(exc)
    else:
        assert all(isinstance(e, ev.RecordEvent) for e in events)


@pytest.mark.parametrize("line, said", [
    ('{"time": NaN, "event": "run_start"}', "not an event"),
    ('{"time": 1, "event": "exit", "task": "worker:0", "code": Infinity}', "not an event"),
    ('{"time": 1e999, "event": "run_start"}', "time: inf where a finite number goes"),
    ('{"time": "12", "event": "run_start"}', "time: text '12' where a number goes"),
    ('{"time": true, "event": "run_start"}', "time: true where a number goes"),
    ('{"time": 1, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": -5}', "log_offset: -5 is negative"),
    ('{"time": 1, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": "10"}', "log_offset: text '10'"),
    ('{"time": 1, "event": "start", "task": "worker:0", "attempt": "1"}', "attempt: text '1' where a whole number"),
    ('{"time": 1, "event": "host_lost", "host": "h2", "settle": NaN}', "not an event"),
    ('{"time": 1, "event": "exit", "task": ["worker:0"], "code": 1}', "task: a list where text goes"),
])
def test_nan_infinity_wrong_types_and_ranges_are_damage_in_one_line(tmp_path, line, said):
    path = tmp_path / "events.jsonl"
    path.write_text('{"time": 1, "event": "run_start"}\n' + line + "\n")
    with pytest.raises(RecordDamaged) as caught:
        parse_events(path.read_text().splitlines(), path)
    text = _one_line(caught.value)
    assert "line 2" in text and said in text, text


def test_a_hosts_suspect_state_is_a_field_and_old_records_read_the_same():
    new = ev.parse_event({"event": "host_lost", "host": "h2", "how": "gone", "suspect": True, "settle": 30})
    old = ev.parse_event({"event": "host_lost", "host": "h2", "settle": 30,
                          "how": "session lost at 12:01:07, host still answering; suspect until it answers for 30 s"})
    gone = ev.parse_event({"event": "host_lost", "host": "h4", "how": "gone from discovery.command's list"})
    assert (new.suspect, old.suspect, gone.suspect) == (True, True, False)


def test_every_kind_written_reads_back_as_the_value_written(tmp_path):
    """The writer checks each event against its class before it writes it: an event with a field
    of the wrong type is said in one line and not written (the record stays readable)."""
    from launcher.record.writer import append_event

    append_event(tmp_path, ev.Start(task="worker:0", attempt=1, host="h", process={"pid": 7, "container": "c"}))
    append_event(tmp_path, ev.HostLost(host="h2", how="x", suspect=True, attempt=1, settle=30.0))
    with pytest.raises(ev.RunRecordDamaged, match="settle: nan where a finite number goes"):
        append_event(tmp_path, ev.HostLost(host="h2", settle=math.nan))
    start, lost = read_events(tmp_path, strict=True)
    assert isinstance(start, ev.Start) and start.process == {"pid": 7, "container": "c"} and start.pid == 7
    assert start["container"] == "c"  # (flattened into the line, as it always was)
    assert isinstance(lost, ev.HostLost) and lost.suspect and lost.settle == 30.0 and lost.attempt == 1


@pytest.mark.parametrize("launcher, said", [
    ({"pid": "12345", "start_time": 1}, "pid: text '12345' where a whole number goes"),
    ({"pid": -1, "start_time": 1}, "pid: -1 is negative"),
    ({"pid": 1.5, "start_time": 1}, "pid: 1.5 where a whole number goes"),
    ({"pid": 5, "start_time": 1, "tasks": {"worker:0": {"pgid": [1]}}}, "task 'worker:0': pgid: a list"),
    ({"pid": 5, "start_time": 1, "host": 7}, "host: 7 where text goes"),
])
def test_launcher_json_fields_of_the_wrong_type_are_damage(tmp_path, launcher, said):
    (tmp_path / "launcher.json").write_text(json.dumps(launcher))
    with pytest.raises(RecordDamaged) as caught:
        read_launcher(tmp_path)
    assert said in _one_line(caught.value)
    (tmp_path / "launcher.json").write_text('{"pid": NaN}')
    with pytest.raises(RecordDamaged, match="not valid JSON"):
        read_launcher(tmp_path)


def test_json_output_is_strict_json():
    text = json_text({"loss": math.nan, "rate": [math.inf, 1.5], "n": {"x": -math.inf}})
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in JSON output")) == \
        {"loss": None, "rate": [None, 1.5], "n": {"x": None}}


# ------------------------------------------------------------------ down: proof before a signal

SPEC = "name: t\nstrategy: multi_worker_mirrored\nentrypoint: [python, x.py]\ntasks: {worker: 1}\n"
RUN_ID = "20260101-000000-abcd"


def _record(tmp_path: Path, launcher: dict) -> Path:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    run = tmp_path / "runs" / "t" / RUN_ID
    (run / "logs").mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps({"name": "t", "backend": "local",
                                               "tasks": [{"type": "worker", "index": 0, "host": "localhost"}]}))
    (run / "events.jsonl").write_text('{"time": 1.0, "event": "run_start"}\n')
    (run / "launcher.json").write_text(json.dumps({"run_id": RUN_ID, "backend": "local", **launcher}))
    (run.parent / "latest").symlink_to(RUN_ID)
    return spec


def _sleep(env: dict | None = None) -> subprocess.Popen:
    """A real process, in its own session (as a task group leader is)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 10
    while start_time(proc.pid) is None or not cmdline(proc.pid):
        assert time.monotonic() < deadline, "the sleep process did not show in /proc within 10 s"
        time.sleep(0.01)
    return proc


def _down(spec: Path, capsys) -> tuple[int, str]:
    code = main(["down", str(spec)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_down_does_not_signal_a_foreign_process_that_a_tampered_record_names(tmp_path, capsys):
    """launcher.json names another process with its real start time and command line (all a
    tamperer can read from /proc): without the run's mark, nothing is signalled, in one line."""
    foreign, group = _sleep(), _sleep()
    try:
        spec = _record(tmp_path, {"pid": foreign.pid, "start_time": start_time(foreign.pid), "host": os.uname().nodename,
                                  "cmdline": cmdline(foreign.pid),
                                  "tasks": {"worker:0": {"pid": group.pid, "pgid": group.pid,
                                                         "start_time": start_time(group.pid)}}})
        code, said = _down(spec, capsys)
        assert foreign.poll() is None and group.poll() is None, said  # both still alive
        lines = [line for line in said.splitlines() if "not signalling" in line or "not stopping" in line]
        assert len(lines) == 2, said
        assert f"process {foreign.pid}" in lines[0] and f"carries no {envnames.SUPERVISOR}={RUN_ID} marker" in lines[0]
        assert f"process group {group.pid}" in lines[1] and f"{envnames.RUN_ID}={RUN_ID}" in lines[1]
        assert code == 1 and "2 thing(s) its record names could not be proven the run's own" in said, said
    finally:
        for proc in (foreign, group):
            proc.kill()
            proc.wait()


def test_down_signals_the_runs_own_processes_once_proven(tmp_path, capsys):
    """The same record, but the processes carry the marks the launcher sets: both are stopped
    (the check is not one that refuses everything)."""
    supervisor = _sleep({envnames.SUPERVISOR: RUN_ID})
    task = _sleep({envnames.RUN_ID: RUN_ID})
    try:
        spec = _record(tmp_path, {"pid": supervisor.pid, "start_time": start_time(supervisor.pid),
                                  "host": os.uname().nodename, "cmdline": cmdline(supervisor.pid),
                                  "tasks": {"worker:0": {"pid": task.pid, "pgid": task.pid,
                                                         "start_time": start_time(task.pid)}}})
        code, said = _down(spec, capsys)
        assert supervisor.wait(timeout=30) == -signal.SIGTERM, said
        assert task.wait(timeout=30) in (-signal.SIGTERM, -signal.SIGKILL), said
        assert "not signalling" not in said and "not stopping" not in said, said
        assert code == 0, said
    finally:
        for proc in (supervisor, task):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_down_refuses_a_recorded_command_line_that_is_not_the_processes(tmp_path, capsys):
    marked = _sleep({envnames.SUPERVISOR: RUN_ID})
    try:
        spec = _record(tmp_path, {"pid": marked.pid, "start_time": start_time(marked.pid),
                                  "host": os.uname().nodename, "cmdline": ["tfcluster", "up"]})
        code, said = _down(spec, capsys)
        assert marked.poll() is None and "runs another command line than the record says" in said, said
        assert code == 1, said
    finally:
        marked.kill()
        marked.wait()


def test_a_damaged_launcher_json_stops_down_in_one_line_and_signals_nothing(tmp_path, capsys):
    spec = _record(tmp_path, {"pid": "1", "start_time": 1})
    code, said = _down(spec, capsys)
    assert code == 1 and "run record damaged" in said and "pid: text '1'" in said and "Traceback" not in said, said


def test_status_json_of_a_record_with_a_nan_loss_is_strict_json(tmp_path, capsys):
    spec = _record(tmp_path, {"pid": 999999, "start_time": 1})
    run = tmp_path / "runs" / "t" / RUN_ID
    (run / "events.jsonl").write_text('{"time": 1.0, "event": "run_start", "tasks": ["worker:0"]}\n'
                                      '{"time": 2.0, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": 0, '
                                      '"progress_offset": 0}\n')
    (run / "logs" / "worker-0.progress").write_text("tfcluster-step epoch=0 step=1 global_step=1 loss=nan accuracy=0.5 "
                                                    "time=2\n")
    main(["status", str(spec), "--json"])
    out = capsys.readouterr().out
    data = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in status --json"))
    assert data["tasks"][0]["key"] == "worker:0" and data["tasks"][0]["global_step"] == 1
    assert data["tasks"][0]["loss"] is None  # (a loss=nan line: not a figure)
    load_run(run, alive=lambda pid, st: False)  # (and the record itself reads)


@SETTINGS
@given(st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from(["pid", "host", "start_time", "cmdline", "tasks",
                                                               "detached", "run_id"]), JSON_VALUES, max_size=5)))
def test_any_launcher_json_is_checked_fields_or_one_damaged_line(tmp_path_factory, data):
    run = tmp_path_factory.mktemp("rec")
    try:
        text = json.dumps(data)
    except ValueError:
        return
    (run / "launcher.json").write_text(text)
    try:
        info = read_launcher(run)
    except RecordDamaged as exc:
        assert "launcher.json" in _one_line(exc)
        return
    pid = info.get("pid")
    assert pid is None or (type(pid) is int and pid >= 0)
    assert all(isinstance(t, dict) for t in (info.get("tasks") or {}).values())
    json.dumps(info, allow_nan=False)  # nothing that is not strict JSON got through


@pytest.mark.parametrize("view", [{"started_at": "x"}, {"tasks": {"worker:0": {"key": "worker:0", "global_step": "7"}}},
                                  {"run": {"started": [1]}}, {"attempt": True}])
def test_a_snapshot_with_values_of_the_wrong_type_is_not_used(tmp_path, view):
    """The snapshot only saves time: one whose view does not check out is passed over and the
    record replayed from its start (the status is the record's, not the snapshot's)."""
    from launcher.record.feed import SNAPSHOT_VERSION, read_snapshot

    _record(tmp_path, {"pid": 999999, "start_time": 1})
    run = tmp_path / "runs" / "t" / RUN_ID
    (run / "snapshot.json").write_text(json.dumps({"version": SNAPSHOT_VERSION, "events_at": 0, "events_read": 0,
                                                   "fed": {}, "waiting": [], "ended": False, "view": view}))
    assert read_snapshot(run) is None
    got = load_run(run, alive=lambda pid, st: False)
    assert got.started == 1.0 and json.dumps(got.to_json(), allow_nan=False)
