"""What a person reads of a run: the tasks' progress records turned into lines for people.

The tasks speak a machine protocol (``tfcluster-epoch epoch=16 global_step=368 loss=0.0851
accuracy=0.9803 examples_per_sec=4029.9 learning_rate=0.001 time=1795696618.254``, launcher/contract/progress.py),
once per worker. On a terminal, under the panel, that becomes one line per epoch for the run::

    epoch 16/30  loss 0.0851  accuracy 0.980  4,030 ex/s  (worker:0-1)

and the strategy once. Heartbeats (steps) are the panel's rows; the other protocol lines become
short sentences. Records come from the tasks' control channels (``progress``), never from what
they print (``feed``): a printed line that looks like one is shown as the task printed it. The
reference worker's start-up lines (``worker: worker:0 strategy=...``), the same
for every task but its key, are folded the same way: one line for the run with the tasks that said it
(``worker: strategy=... (worker:0-1)``); a warm standby's protocol (``(standby) tfcluster-standby
waiting``) is the panel's business, not a line. Any other line -- a user's own script's output, a
traceback, the worker's errors and warnings -- is passed on as it is. The panel folds both; plain
lines (``--plain``, pipes) show the records' people's lines and the tasks' own lines as printed
(launcher/ui/console.py). The task logs keep every line, the progress files every record.
Pure: lines in, lines out.
"""

from __future__ import annotations

import statistics
from typing import Callable, Iterable, Optional

from launcher.contract import progress as pr
from launcher.contract.progress import Progress, parse

# Shown by the panel's rows (step, first_step), or nothing a person needs (a PSS server up, a checkpoint,
# a backup's seconds: the run's goodput counts them).
HIDDEN = (pr.StepLine, pr.FirstStepLine, pr.ServerLine, pr.CheckpointLine, pr.BackupLine, pr.SavingLine)  # (preempted follows saving)
HIDDEN_KINDS = frozenset({"standby"})  # (a standby's protocol: the panel's business)
Line = tuple[Optional[str], str]  # (the task it is about, or None for the run; the text)
STANDBY = "(standby) "  # how the supervisor marks a warm standby's lines (launcher/supervise/standby.py)
STANDBY_PROTOCOL = STANDBY + "tfcluster-standby"
WORKER = "worker: "  # the reference worker's own lines (worker/); its errors and warnings are never folded
NOT_FOLDED = ("worker: error", "worker: warning")


class PeopleLines:
    """Feed it every task line (``feed``); it returns what to show now. An epoch is shown once
    every task that trains has reported it (or when a later epoch, or the end, comes first)."""

    def __init__(self, tasks: Callable[[], Iterable[str]] = tuple) -> None:
        self.tasks = tasks  # the run's tasks now (the panel's view): who a start-up line waits for
        self.folding: dict[str, dict[str, str]] = {}  # start-up line's template -> task -> its line
        self.folded: set[str] = set()  # templates shown this attempt
        self.epochs: Optional[int] = None  # the run's epochs, from the start lines
        self.strategy_shown = False
        self.started: set[str] = set()  # tasks that printed a start line this attempt
        self.expected: set[str] = set()  # the tasks that reported the last epoch shown
        # (kind, epoch) -> key -> its line
        self.pending: dict[tuple[str, int], dict[str, "pr.EpochLine | pr.ResultLine"]] = {}
        self.shown: set[tuple[str, int]] = set()

    # -------------------------------------------------------------- in

    def feed(self, key: str, line: str) -> list[Line]:
        """A line ``key`` printed: as it is, or folded with the same start-up line of the others
        (whatever it holds: a line that looks like a progress record is the task's text)."""
        template = _template(key, line)
        return [(key, line)] if template is None else self._fold(key, template)

    def progress(self, key: str, line: str) -> list[Line]:
        """A progress record of ``key``'s (its control channel's): the people's lines it makes now."""
        progress = parse(line)
        if progress is None:
            return []  # (a standby's protocol, "(standby) tfcluster-standby ...": the panel's business)
        out = self._fold_all() if isinstance(progress, (pr.StartLine, pr.EpochLine, pr.ResultLine)) else []
        return out + self._feed(key, progress, line)

    def _feed(self, key: str, p: Progress, line: str) -> list[Line]:
        if isinstance(p, HIDDEN) or p.kind in HIDDEN_KINDS:
            return []
        if isinstance(p, pr.StartLine):
            return self._start(key, p)
        if isinstance(p, (pr.EpochLine, pr.ResultLine)):
            return self._report(key, p)
        if isinstance(p, pr.EvalLine):
            return [(key, "evaluated " + _join(p.checkpoint, _metrics(p.loss, p.accuracy)))]
        if isinstance(p, pr.EvalDoneLine):
            return [(key, f"evaluator done ({p.get('reason', '?')}, "
                          f"{p.get('evaluated', '?')} checkpoint(s) evaluated)")]
        if isinstance(p, pr.PreemptedLine):
            return [(key, f"preempted at epoch {p.get('epoch', '?')} step {p.get('step', '?')}"
                          + (f"; saved to {p.saved}" if p.saved else ""))]
        if isinstance(p, pr.SavedLine):
            return [(key, f"saved {p.path or ''}".rstrip())]
        words = " ".join(f"{k} {v}" for k, v in p.fields.items())  # a kind not known here, in words
        return [(key, f"{p.kind.replace('_', ' ')} {words}".rstrip())]

    def flush(self) -> list[Line]:
        """Every report still waiting for other tasks (the panel is going away)."""
        out: list[Line] = self._fold_all()
        for slot in sorted(self.pending, key=lambda s: (s[0] == "result", s[1])):
            out += self._show(slot)
        return out

    # -------------------------------------------------------------- the parts

    def _start(self, key: str, p: pr.StartLine) -> list[Line]:
        out: list[Line] = []
        if key in self.started:  # a second start from the same task: a new attempt
            out = self.flush()  # (what the last attempt's tasks reported, before its epochs repeat)
            self.started.clear()
            self.shown.clear()
            self.folded.clear()
        self.started.add(key)
        if p.epochs:
            self.epochs = p.epochs
        if self.strategy_shown or not p.strategy:
            return out
        self.strategy_shown = True
        cls = (p.strategy_class or "").rpartition(".")[2]
        # (the replicas and batch as printed)
        details = [d for d in (cls, f"{p.get('replicas')} replica(s)" if p.get("replicas") else "",
                               f"global batch {p.get('global_batch')}" if p.get("global_batch") else "") if d]
        return out + [(None, f"strategy {p.strategy}" + (f" ({', '.join(details)})" if details else ""))]

    def _fold(self, key: str, template: str) -> list[Line]:
        """A start-up line: shown once every task of the run said it (or when training starts)."""
        if template in self.folded:  # a straggler of a line already shown: its task joins silently
            return []
        said = self.folding.setdefault(template, {})
        said[key] = template
        try:
            waiting = set(self.tasks()) - set(said)
        except RuntimeError:  # (the view's tasks changed while read: ask again at the next line)
            waiting = {""}
        return self._show_folded(template) if not waiting else []

    def _fold_all(self) -> list[Line]:
        out: list[Line] = []
        for template in list(self.folding):
            out += self._show_folded(template)
        return out

    def _show_folded(self, template: str) -> list[Line]:
        said = self.folding.pop(template, {})
        if not said:
            return []
        self.folded.add(template)
        text = template.replace(_KEY + " ", "").replace(_KEY, "").rstrip()
        return [(None, f"{text}  ({compact_keys(said)})")]

    def _report(self, key: str, p: "pr.EpochLine | pr.ResultLine") -> list[Line]:
        slot = (p.kind, (p.epoch or 0) if isinstance(p, pr.EpochLine) else 0)
        out: list[Line] = []
        if isinstance(p, pr.EpochLine):  # an earlier epoch still waiting will not complete now: show it
            for older in sorted(s for s in self.pending if s[0] == "epoch" and s[1] < slot[1]):
                out += self._show(older)
        if slot in self.shown:  # a straggler of a report already shown: its task joins silently
            return out
        self.pending.setdefault(slot, {})[key] = p
        waiting_for = (self.expected or self.started) - set(self.pending[slot])
        if not waiting_for:
            out += self._show(slot)
        return out

    def _show(self, slot: tuple[str, int]) -> list[Line]:
        reports = self.pending.pop(slot, {})
        if not reports:
            return []
        self.shown.add(slot)
        if slot[0] == "epoch":
            self.expected = set(reports)
        first = reports[min(reports, key=_order)]
        rates = [r.examples_per_sec for r in reports.values() if r.examples_per_sec is not None]
        rate = f"{statistics.median(rates):,.0f} ex/s" if rates else ""
        if isinstance(first, pr.EpochLine):
            head = f"epoch {slot[1]}" + (f"/{self.epochs}" if self.epochs else "")
            extra = _metrics(first.test_loss, first.test_accuracy, "test ")
        else:
            head = "result"
            extra = ""
        text = _join(head, _metrics(first.loss, first.accuracy), rate, extra, f"({compact_keys(reports)})")
        return [(None, text)]


_KEY = "\0"  # where the task's key was in a start-up line's template


def _template(key: str, line: str) -> Optional[str]:
    """The line with its task's key taken out, if it is one of the reference worker's start-up
    lines (``worker: ...``, or a standby's), else None."""
    text = line[len(STANDBY):] if line.startswith(STANDBY) else line
    if not text.startswith(WORKER) or text.startswith(NOT_FOLDED):
        return None
    return line.replace(key, _KEY)


def _metrics(loss: Optional[float], accuracy: Optional[float], label: str = "") -> str:
    parts = []
    if loss is not None:
        parts.append(f"{label}loss {loss:.4f}")
    if accuracy is not None:
        parts.append(f"{label}accuracy {accuracy:.3f}")
    return "  ".join(parts)


def _join(*parts: Optional[str]) -> str:
    return "  ".join(p for p in parts if p)


_TYPE_ORDER = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}


def _order(key: str) -> tuple:
    kind, _, index = key.partition(":")
    return (_TYPE_ORDER.get(kind, 9), kind, int(index) if index.isdigit() else 0, key)


def compact_keys(keys) -> str:
    """``worker:0-1``, ``chief:0, worker:0-2,5``: task keys, each type once, runs of indexes joined."""
    by_type: dict[str, list[int]] = {}
    others = []
    for key in sorted(keys, key=_order):
        kind, _, index = key.partition(":")
        if index.isdigit():
            by_type.setdefault(kind, []).append(int(index))
        else:
            others.append(key)
    out = []
    for kind, indexes in by_type.items():
        runs, start = [], None
        for i, n in enumerate(indexes):
            if start is None:
                start = n
            if i + 1 == len(indexes) or indexes[i + 1] != n + 1:
                runs.append(str(start) if start == n else f"{start}-{n}")
                start = None
        out.append(f"{kind}:{','.join(runs)}")
    return ", ".join(out + others)
