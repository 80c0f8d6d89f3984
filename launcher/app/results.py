"""What the use cases return: typed results the CLI renders and turns into an exit code.

A use case says how its command ended in words (``outcome``: record/states.py's Outcome for a
run, the same words for the others); ``launcher.errors.exit_code_for`` is the one mapping to exit
codes, and only the CLI (launcher/cli/) calls it. Nothing in launcher/app/ prints or exits: what
a person reads beyond the console's progress lines is here as data (a dry run's plan, the commands
that reach a detached run) for the CLI to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launcher.plan.build import Plan
from launcher.record.states import Outcome


@dataclass(frozen=True)
class RunResult:
    """``up`` (and each run of ``compare``): how the run ended, where its record is, and why
    (the outcome event's reason). A dry run starts nothing: ``dry_run`` holds the plan and the
    line that says what would start, for the CLI to show, and ``run_id`` is ""."""

    outcome: Outcome
    run_id: str = ""
    record_dir: Optional[Path] = None
    reason: str = ""
    dry_run: Optional["DryRun"] = None


@dataclass(frozen=True)
class DryRun:
    plan: Plan  # the plan it would start (the CLI shows it as ``tfcluster plan`` does, on stdout)
    note: str  # "dry run: preflight passed; would start N tasks on backend B" (a launcher message)
    spares: tuple[str, ...] = ()  # the hosts no task uses (elastic runs)
    standby: str = ""  # the warm standby's line
    notes: tuple[str, ...] = ()  # below the plan (a group that starts small)


@dataclass(frozen=True)
class DetachResult:
    """``up --detach`` in the foreground. Handed over: ``outcome`` succeeded, ``run_id``, its
    supervisor's pid and the backend's note (the CLI shows them with the commands that reach the
    run). Otherwise the supervisor ended before every task was ready (``supervisor_pid`` ""):
    ``relayed_exit`` is its own exit status, which the foreground passes on (a spec error there is
    exit 2 here too), unless Ctrl-C stopped it (``interrupted``) or it never said (``failed``)."""

    outcome: Outcome
    run_id: str = ""
    supervisor_pid: str = ""
    note: str = ""
    relayed_exit: Optional[int] = None


@dataclass(frozen=True)
class DownResult:
    """``down``: the run it looked at, and whether anything of it was still running."""

    run_id: str
    stopped_any: bool
    # What the record named that could not be proven the run's own and was left alone (each said
    # in its line already): down failed then, after stopping what it could prove.
    refused: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        return Outcome.FAILED if self.refused else Outcome.SUCCEEDED


@dataclass(frozen=True)
class TensorBoardResult:
    """``tensorboard``: how the server ended (Ctrl-C: interrupted; an exit status but 0: failed,
    with ``server_exit``)."""

    outcome: Outcome
    server_exit: Optional[int] = None


@dataclass(frozen=True)
class StacksResult:
    """``stacks``: the run asked, every live task's stacks (task -> faulthandler's text) and, for
    a task without, why (task -> note)."""

    run_id: str
    stacks: dict
    notes: dict

    @property
    def outcome(self) -> Outcome:
        return Outcome.SUCCEEDED if self.stacks else Outcome.FAILED
