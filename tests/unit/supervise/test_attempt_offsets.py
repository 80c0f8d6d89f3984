"""Each attempt's lines are cut from a task's log (and from output.log) by the offsets its ``start``
event records (``logs --attempt``, ``status``, ``attach``). They must be fixed before the task can
write: a task that prints at once used to have lines written before its offset was read (after
``backend.start`` returned), so they were counted in the attempt before.

The gate: these backends' ``start`` (and a standby's promotion) write the task's first line through
the supervisor's own sink *before* returning, the order a loaded machine gives a real task that
prints at once. No sleep: the line is written synchronously, so without the fix every run shows it.
"""

from __future__ import annotations

from pathlib import Path

from launcher.app.inspect import _attempt_range
from launcher.record.layout import OUTPUT_FILE, log_path
import launcher.record.events as ev
from tests.support.fakes import Script, ScriptedTasks, scripted, supervise


class PrintsAtOnce(ScriptedTasks):
    """Each start's task says ``hello attempt=N`` before ``start`` returns."""

    def start(self, request, on_line):
        handle = super().start(request, on_line)
        on_line(request.key, f"hello attempt={request.env['TFCLUSTER_RESTART_COUNT']}")
        return handle


class PromotedPrintsAtOnce(ScriptedTasks):
    """A standby that says ``promoted attempt=N`` as soon as it is promoted, before ``promote`` returns."""

    def promote(self, handle, request):
        super().promote(handle, request)
        handle.on_line(request.key, f"promoted attempt={request.env['TFCLUSTER_RESTART_COUNT']}")


MWMS = """\
    name: s
    strategy: multi_worker_mirrored
    entrypoint: python -m worker
    tasks: {worker: 2}
    restart: {max_restarts: 2, backoff: 0, warm_standby: WARM}
    watchdog: {stop_grace: 0}
"""


def _run_dir(tmp_path: Path) -> Path:
    return next(p for p in (tmp_path / "runs" / "s").iterdir() if p.is_dir() and not p.is_symlink()
                and p.name != "state")


def _lines(path: Path, run: Path, task, attempt: int) -> list[str]:
    start, end = _attempt_range(run, task, attempt)
    data = path.read_bytes()[start:end]
    return data.decode().splitlines()


def test_a_task_that_prints_before_its_start_is_recorded_keeps_the_line_in_its_own_attempt(tmp_path):
    backend = scripted(PrintsAtOnce({("worker:1", 0): Script(code=137, polls=2, silent=True),
                                     ("worker:0", 0): Script(code=None, silent=True)}, default=Script(code=0, polls=2, silent=True)))
    result = supervise(tmp_path, MWMS.replace("WARM", "false"), backend)
    assert result.code == 0, result.err
    run = _run_dir(tmp_path)
    for key in ("worker:0", "worker:1"):
        assert _lines(log_path(run, key), run, key, 1) == ["hello attempt=0"], key
        assert _lines(log_path(run, key), run, key, 2) == ["hello attempt=1"], key
    # output.log: each attempt's range holds its own tasks' first lines and nothing of the other's
    first = _lines(run / OUTPUT_FILE, run, None, 1)
    second = _lines(run / OUTPUT_FILE, run, None, 2)
    assert sorted(first) == ["[worker:0] hello attempt=0", "[worker:1] hello attempt=0"]
    assert sorted(second) == ["[worker:0] hello attempt=1", "[worker:1] hello attempt=1"]


def test_a_promoted_standby_that_prints_at_once_keeps_the_line_in_the_attempt_it_serves(tmp_path):
    backend = scripted(PromotedPrintsAtOnce({("worker:1", 0): Script(code=137, polls=4, silent=True),
                                             ("worker:0", 0): Script(code=None, silent=True)},
                                            default=Script(code=0, polls=3, silent=True)), warm_standby=True)
    result = supervise(tmp_path, MWMS.replace("WARM", "true"), backend)
    assert result.code == 0, result.err
    assert sorted(e["task"] for e in result.events if isinstance(e, ev.StandbyPromoted)) == ["worker:0", "worker:1"]
    run = _run_dir(tmp_path)
    for key in ("worker:0", "worker:1"):
        first = _lines(log_path(run, key), run, key, 1)
        second = _lines(log_path(run, key), run, key, 2)
        assert "promoted attempt=1" not in first, (key, first)
        assert "promoted attempt=1" in second, (key, second)


def test_a_pss_worker_restarted_alone_keeps_its_first_line_in_its_restart(tmp_path):
    """The parameter-server strategy restarts a dead worker alone, within the attempt; its new
    process's line is after its first process's lines in its log, and its first process's lines
    keep theirs."""
    spec = """\
        name: s
        strategy: parameter_server
        entrypoint: python -m worker
        tasks: {chief: 1, worker: 2, ps: 1}
        restart: {max_restarts: 2}
        watchdog: {stop_grace: 0}
    """
    backend = scripted(PrintsAtOnce({("worker:1", 0): Script(code=1, polls=2, silent=True),
                                     ("chief:0", 0): Script(code=0, polls=8, silent=True)},
                                    default=Script(code=None, silent=True)))
    result = supervise(tmp_path, spec, backend)
    starts = [e for e in result.events if isinstance(e, ev.Start) and e["task"] == "worker:1"]
    assert len(starts) == 2, result.err
    run = _run_dir(tmp_path)
    data = log_path(run, "worker:1").read_bytes()
    # the second start's offset is where its own first line begins
    assert data[starts[1]["log_offset"]:].decode().splitlines()[0] == "hello attempt=0"
    assert data[:starts[1]["log_offset"]].decode().splitlines() == ["hello attempt=0"]
