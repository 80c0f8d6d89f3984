"""A failed attempt as people read it, from its failure event alone (launcher/record/events.py's
``Failure``): the failure's line, the tasks that exited as its consequence, the report block (each
named task's exception, hint and last lines; a hang's stacks instead) and the others that failed
too. Pure: an event in, lines out (launcher/ui/eventlines.py says them)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from launcher.record import events as ev
from launcher.record.layout import log_path, stacks_path
from launcher.record.noise import TAIL, is_noise
from launcher.record.stacks import in_user_code, parse
from launcher.system.procinfo import describe_exit

STACK_DEPTH = 12  # frames of each thread shown in a hang's report (the record keeps them all)


def failed_line(key: str, reason: str, number: int, max_restarts: int) -> str:
    return f"{key} failed: {reason} (attempt {number + 1} of {max_restarts + 1})"


def consequence_lines(key: str, consequences: Sequence[tuple[str, Optional[int]]]) -> list[str]:
    return [f"{other} exited ({describe_exit(code)}) as a consequence of {key} (its last lines say a peer was lost)"
            for other, code in consequences]


def also_failed_line(others: Sequence[str]) -> str:
    return f"also failed: {', '.join(others)}"


def report_lines(key: str, errors: Sequence[str], hint: Optional[str], tail: Sequence[str], log: object,
                 verbose: bool) -> list[str]:
    """The exception line(s) ``key`` died of (``errors``), the ``hint`` for a known signature, its
    last lines (``tail``; without TF's known harmless lines unless ``verbose``: the log at ``log``
    has them all)."""
    if not tail:
        return []
    lines = [f"  {key}: {line}" for line in errors]
    if hint:
        lines.append(f"  hint: {hint}")
    lines.append(f"  last lines of {key} ({log}):")
    shown = [line for line in tail if verbose or not is_noise(line)]
    lines += [f"  | {line}" for line in shown[-TAIL:]]
    return lines


def stack_lines(key: str, stack: str, path: object) -> list[str]:
    """A hung task's stacks as the report shows them: the threads in code of the user's own first
    (launcher/record/stacks.py), each innermost frame first."""
    threads = parse(stack)
    threads.sort(key=lambda t: in_user_code(t) is None)
    lines = [f"  stacks of {key} ({path}):"]
    for t in threads:
        if not t.frames:
            continue
        lines.append(f"  | thread {t.ident}" + (" (in user code)" if in_user_code(t) is not None else ""))
        lines += [f"  |   {f.file}:{f.line} in {f.func}" for f in t.frames[:STACK_DEPTH]]
        if len(t.frames) > STACK_DEPTH:
            lines.append(f"  |   ... {len(t.frames) - STACK_DEPTH} more")
    return lines


def failure_block(e: ev.Failure, run_dir: str, verbose: bool) -> list[str]:
    """The report block of failure ``e`` of the run recorded in ``run_dir``: a hang's stacks, else
    each named task's exception, hint and last lines."""
    if e.stack:
        return stack_lines(e.task, "\n".join(e.stack), stacks_path(Path(run_dir), (e.attempt or 0) + 1, e.task))
    shown = [e.task, *e.consequences]
    out = []
    for k in shown:
        errors, hint = (e.errors, e.hint) if k == e.task else (e.peer_errors.get(k, []), e.peer_hints.get(k))
        tail = e.tails.get(k, e.last_lines if k == e.task else [])
        out += report_lines(k, errors, hint, tail, log_path(Path(run_dir), k), verbose)
    return out
