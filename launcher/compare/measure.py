"""One run's figures, read from its run record: the events (events.jsonl) and the progress
lines of the task that decides success (the chief, or worker 0). Pure: no files, no clock.

Times are the worker's ``time=`` stamps against the launcher's ``run_start`` event (the same
clock on a local run; across ssh hosts they assume synchronised clocks). examples/s is
``progress.Throughput``'s: over the intervals between progress lines after each attempt's first
step, and their median, so an interval that holds an epoch's test evaluation does not move it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional, TypeVar

from launcher.contract import progress
from launcher.contract.progress import Progress, Throughput, parse
from launcher.record.events import Failure, RecordEvent, RunOutcome, parse_event
from launcher.record.run import fold_run
from launcher.record.states import Outcome, ResultStatus

OK, FAILED, INTERRUPTED = ResultStatus.OK, ResultStatus.FAILED, ResultStatus.INTERRUPTED


@dataclass
class Measurement:
    status: str = FAILED  # ok | failed | interrupted
    outcome: Optional[str] = None  # the run's Outcome (record/states.py); None: it never started (error)
    exit_code: Optional[int] = None  # what `tfcluster up` of it exits with: set by the CLI's mapping
    error: str = ""
    attempts: int = 0
    replicas: Optional[int] = None
    global_batch: Optional[int] = None
    time_to_first_step_s: Optional[float] = None
    examples_per_sec: Optional[float] = None  # median over intervals after the first step
    examples_per_sec_overall: Optional[float] = None  # the worker's own, first step's end to last step's end
    time_per_epoch_s: Optional[float] = None
    epochs: int = 0
    steps: int = 0
    train_accuracy: Optional[float] = None
    train_loss: Optional[float] = None
    test_accuracy: Optional[float] = None
    test_loss: Optional[float] = None
    time_to_target_s: Optional[float] = None
    wall_s: Optional[float] = None
    started_at: Optional[float] = None  # the run_start event's time (epoch seconds)
    # The run's goodput (launcher/record/goodput.py): productive training over wall time, and
    # its badput by category (s); set from the whole record (every task's lines), not by ``measure``.
    goodput: Optional[float] = None
    badput: dict = field(default_factory=dict)
    # Test accuracy after every epoch: {"epoch", "elapsed_s", "examples", "test_accuracy", "test_loss"}.
    curve: list = field(default_factory=list)
    # Training progress for TensorBoard: {"global_step", "time", "loss", "accuracy"} per step line.
    trace: list = field(default_factory=list)
    # examples/s of each interval (TensorBoard), {"global_step", "time", "examples_per_sec"}.
    rates: list = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def measure(events: Iterable[dict], lines: Iterable[str], target_accuracy: Optional[float] = None) -> Measurement:
    events = [e if isinstance(e, RecordEvent) else parse_event(dict(e)) for e in events]
    records = [p for p in (parse(line) for line in lines) if p is not None]
    m = Measurement()
    run = fold_run(events)  # (the run's start, outcome and attempts: record/run.py)
    t0 = m.started_at = run.started
    outcome = next((e for e in reversed(events) if isinstance(e, RunOutcome)), None)
    if run.outcome:
        m.status = {Outcome.SUCCEEDED: OK, Outcome.INTERRUPTED: INTERRUPTED}.get(run.outcome, FAILED)
        m.outcome = run.outcome
        m.attempts = run.outcome_attempts or 0
        if t0 is not None and run.ended is not None:
            m.wall_s = _round(run.ended - t0)
    failure = next((e for e in reversed(events) if isinstance(e, Failure)), None)
    if m.status != OK:
        m.error = error_text(failure, outcome)

    start = _last(records, progress.StartLine)
    if start is not None:
        m.replicas, m.global_batch = start.replicas, start.global_batch
    first = next((p for p in records if isinstance(p, progress.FirstStepLine)), None)
    if first is not None and t0 is not None and first.time is not None:
        m.time_to_first_step_s = _round(first.time - t0)

    rates, m.rates = _interval_rates(records)
    if rates:
        m.examples_per_sec = _round(statistics.median(rates), 1)
    result = _last(records, progress.ResultLine)
    if result is not None:
        m.examples_per_sec_overall = result.examples_per_sec
        m.test_accuracy, m.test_loss = result.accuracy, result.loss
        m.train_accuracy, m.train_loss = result.train_accuracy, result.train_loss
        m.steps = result.steps_run or 0

    epochs = _last_attempt(records, progress.EpochLine)
    m.epochs = max((p.epoch or 0 for p in epochs), default=0)
    m.time_per_epoch_s = _epoch_time(epochs, start)
    batch = m.global_batch or 0
    for p in (p for p in records if isinstance(p, progress.EpochLine)):
        accuracy, when = p.test_accuracy, p.time
        if accuracy is None or when is None or t0 is None:
            continue
        m.curve.append({"epoch": p.epoch, "elapsed_s": _round(when - t0), "examples": (p.global_step or 0) * batch,
                        "test_accuracy": accuracy, "test_loss": p.test_loss})
    if target_accuracy is not None:
        hit = next((c for c in m.curve if c["test_accuracy"] >= target_accuracy), None)
        m.time_to_target_s = hit["elapsed_s"] if hit else None
    m.trace = [{"global_step": p.global_step, "time": p.time, "loss": p.loss, "accuracy": p.accuracy}
               for p in records if isinstance(p, progress.StepLine) and p.global_step is not None]
    return m


def error_text(failure: Optional[Failure], outcome: Optional[RunOutcome]) -> str:
    """One line: which task failed and why, with its exception (or ``error:``) line."""
    if failure is None:
        return (outcome.reason or outcome.outcome) if outcome is not None else "no outcome recorded"
    text = f"{failure.task} failed: {failure.reason}"
    detail = next(iter(failure.errors), None)
    if detail is None:
        detail = next((line.strip() for line in reversed(failure.last_lines) if "error:" in line.lower()), None)
    return f"{text}: {detail}" if detail else text


def _interval_rates(records: list[Progress]) -> tuple[list[float], list[dict]]:
    """examples/s between consecutive progress marks, each attempt on its own: its first step,
    then every step line."""
    rates: list[float] = []
    points: list[dict] = []
    throughput: Optional[Throughput] = None
    base = 0
    for p in records:
        if isinstance(p, progress.StartLine):
            _flush(throughput, rates, points)
            throughput = Throughput(p.global_batch or 0, keep_intervals=True)
            base = p.global_step or 0
        elif throughput is not None and isinstance(p, progress.FirstStepLine) and p.time is not None:
            # Its global_step where the worker prints it, else the start line's plus one.
            throughput.mark(p.global_step or base + 1, p.time)
        elif throughput is not None and isinstance(p, progress.StepLine) and throughput.first_time is not None:
            if p.global_step is not None and p.time is not None:
                throughput.mark(p.global_step, p.time)
    _flush(throughput, rates, points)
    return rates, points


def _flush(throughput: Optional[Throughput], rates: list, points: list) -> None:
    if throughput is None or throughput.first_time is None:
        return
    for step, when, rate in throughput.intervals():
        rates.append(rate)
        points.append({"global_step": step, "time": when, "examples_per_sec": round(rate, 1)})


def _epoch_time(epochs: list[progress.EpochLine], start: Optional[progress.StartLine]) -> Optional[float]:
    """The median time between consecutive epoch lines (each includes that epoch's test
    evaluation); with one epoch, from the attempt's start line to it."""
    times = [p.time for p in epochs if p.time is not None]
    if len(times) >= 2:
        return _round(statistics.median(b - a for a, b in zip(times, times[1:])))
    if times and start is not None and start.time is not None:
        return _round(times[0] - start.time)
    return None


K = TypeVar("K", bound=Progress)


def _last_attempt(records: list[Progress], kind: type[K]) -> list[K]:
    """The records of class ``kind`` since the last start line (the attempt that finished)."""
    last_start = max((i for i, p in enumerate(records) if isinstance(p, progress.StartLine)), default=-1)
    return [p for p in records[last_start + 1:] if isinstance(p, kind)]


def _last(records: list[Progress], kind: type[K]) -> Optional[K]:
    return next((p for p in reversed(records) if isinstance(p, kind)), None)


def _round(value: float, digits: int = 2) -> float:
    return round(value, digits)
