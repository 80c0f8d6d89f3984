"""Crashes (docs/concepts/trust.md): whatever a run record holds (NaN and Infinity, values of the
wrong type, a non-numeric pid, negative or text offsets, a snapshot that does not check out) and
whatever a spec holds (a NUL in run_dir or in a docker path), every command ends in a documented
exit code with a few lines and no traceback; JSON output stays strict JSON."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import tfcluster

from .conftest import assert_bounded, spec_text

COMMANDS = (("status",), ("status", "--json"), ("runs",), ("logs",), ("logs", "--tail", "3"), ("down",))


def _append(path, *lines: str) -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def _plant(run_dir, case: str) -> None:
    events, launcher = run_dir / "events.jsonl", run_dir / "launcher.json"
    if case == "nan-time":
        _append(events, '{"time": NaN, "event": "run_start"}')
    elif case == "infinity-time":
        _append(events, '{"time": Infinity, "event": "exit", "task": "worker:0", "code": 0}')
    elif case == "huge-time":
        _append(events, '{"time": 1e999, "event": "exit", "task": "worker:0", "code": 0}')
    elif case == "negative-offset":
        _append(events, '{"time": 2, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": -5}')
    elif case == "text-offset":
        _append(events, '{"time": 2, "event": "start", "task": "worker:0", "attempt": 0, "log_offset": "10"}')
    elif case == "text-pid":
        info = json.loads(launcher.read_text())
        launcher.write_text(json.dumps({**info, "pid": "12345"}))
    elif case == "nan-pid":
        launcher.write_text(launcher.read_text().replace('"pid": ', '"pid": NaN, "x": ', 1))
    elif case == "list-pgid":
        info = json.loads(launcher.read_text())
        launcher.write_text(json.dumps({**info, "tasks": {"worker:0": {"pgid": [1]}}}))
    elif case == "snapshot-types":
        (run_dir / "snapshot.json").write_text(json.dumps({"version": 1, "events_at": "x", "view": {"attempt": True}}))
    elif case == "nan-loss":
        _append(events, '{"time": 2, "event": "progress", "task": "worker:0", "kind": "step", "loss": NaN}')
    else:
        raise AssertionError(case)


CASES = ["nan-time", "infinity-time", "huge-time", "negative-offset", "text-offset", "text-pid", "nan-pid",
         "list-pgid", "snapshot-types", "nan-loss"]


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_record_is_a_few_lines_and_a_documented_exit_for_every_command(run, case):
    work, run_dir, _outside = run
    _plant(run_dir, case)
    for args in COMMANDS:
        result = tfcluster(*args, "r.yaml", cwd=work, timeout=60)
        assert_bounded(result, output=args[0] != "down", task_bytes=args[0] == "logs")
        if args == ("status", "--json") and result.returncode == 0:
            json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in status --json ({case})"))


@pytest.mark.parametrize("extra, field", [
    ({"run_dir": '"./runs\\0x"'}, "run_dir"),
    ({"backend": "docker", "docker": '{image: "python:3.11", volumes: ["/data\\0x:/data"]}'}, "volumes"),
    ({"backend": "docker", "docker": '{image: "python:3.11", build: "./ctx\\0"}'}, "build"),
])
def test_a_nul_in_a_path_is_refused_at_validate_and_up_in_one_line(tmp_path, extra, field):
    (tmp_path / "c.yaml").write_text(spec_text(**extra))
    for args in (("validate",), ("up", "--plain")):
        result = tfcluster(*args, "c.yaml", cwd=tmp_path, timeout=60)
        assert_bounded(result, 2)
        assert field in result.stderr and "NUL" in result.stderr.upper(), result.stderr
    assert not (tmp_path / "runs").exists()
