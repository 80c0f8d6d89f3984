"""What ``BackendKind.run_elsewhere`` is asked to run: one tfcluster command for a spec whose
supervisor and run record live on another machine (the ssh backend's ``ssh.supervisor``).

The CLI builds it from what it parsed (typed values, not the user's words); the backend runs it
there as a command line (``argv``), naming the spec by its path on that machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# The commands whose supervisor or run record may live elsewhere.
COMMANDS = ("up", "status", "logs", "attach", "down", "runs", "stacks")


@dataclass(frozen=True)
class Elsewhere:
    command: str  # one of COMMANDS
    run_id: Optional[str] = None  # --run RUN_ID (status, logs, attach, down, stacks)
    json: bool = False  # --json (status, runs)
    task: Optional[str] = None  # logs TASK, stacks TASK
    follow: bool = False  # logs --follow
    attempt: Optional[int] = None  # logs --attempt N
    tail: Optional[int] = None  # logs --tail N
    timeout: Optional[float] = None  # down --timeout SECONDS, stacks --timeout SECONDS
    detach: bool = False  # up --detach: this machine may disconnect once the run is detached
    quiet: bool = False  # up --quiet
    plain: bool = False  # up --plain
    verbose: bool = False  # up --verbose
    force: bool = False  # up --force

    def __post_init__(self) -> None:
        if self.command not in COMMANDS:
            raise ValueError(f"{self.command!r} does not run elsewhere; only {', '.join(COMMANDS)} do")

    def argv(self, spec: str) -> list[str]:
        """``tfcluster``'s arguments there, naming the spec as ``spec``."""
        out = [self.command, spec] + ([self.task] if self.task is not None else [])
        for flag, value in (("--run", self.run_id), ("--attempt", self.attempt), ("--tail", self.tail),
                            ("--timeout", self.timeout)):
            if value is not None:
                out += [flag, str(value)]
        return out + [flag for flag, on in (("--json", self.json), ("--follow", self.follow),
                                             ("--detach", self.detach), ("--quiet", self.quiet),
                                             ("--plain", self.plain), ("--verbose", self.verbose),
                                             ("--force", self.force)) if on]
