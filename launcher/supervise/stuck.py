"""Which task stopped the group, from evidence, pure: a function of every task's stacks (faulthandler's
text, launcher/contract/liveness.py), its count of TensorFlow function calls and its process state.
The supervisor takes the stacks when the group stops progressing (launcher/supervise/phases.py) and
says the verdict; ``tfcluster stacks`` prints the same stacks.

The evidence, in order:

1. a stopped process (SIGSTOP, a paused container): it stopped the others;
2. a task with a thread that sits in user code -- the main thread in a callback, or a thread
   TensorFlow called into (``from_generator``, ``py_function``) in the generator -- while the others
   wait inside TensorFlow. A thread sits in user code when, from its innermost frame outwards, a
   frame of the user's own comes before any of TensorFlow's or Keras's (the standard library and
   other libraries -- ``time.sleep``, ``socket``, ``requests`` -- are passed over: a generator
   blocked in a download is the generator's). A user frame that every task shows alike (a
   metrics thread on every worker) is no evidence;
3. every task inside TensorFlow, one alone with a thread of TensorFlow's blocked in the kernel
   (opening or reading a file or a pipe) while the others all sit in their step: that one. What a
   thread does now is the stronger evidence than a count, which is a beat old and counts every
   call alike (launcher/supervise/tfplace.py);
4. among several such tasks, or none, the one behind the others in its count by more than one
   call (``NEAR``);
5. every task inside TensorFlow: the one that waits somewhere else than the others -- in its input
   pipeline, a save, an evaluation or a callback -- while they wait in a collective or their step
   (launcher/supervise/tfplace.py), named with the frame that tells;
6. failing that, the one behind the others by a single call.

Where none of that decides, the verdict says so and names no task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

# The stacks' text parsed, and each frame's kind (the record's stacks files are read the same way).
from launcher.record.stacks import Frame, Thread, in_user_code, is_stack_line, kind, parse  # noqa: F401
from launcher.supervise.tfplace import odd_one_out


# A count this close to the others' is no evidence against the stacks: a task in lockstep with its
# peers can be one call apart from them at the stall (a call that returned just before it, the
# peer's same call still running). A task in its input pipeline while its peer waited in the
# collective was once one call ahead of that peer, and the peer was named "behind" (a full test run).
NEAR = 1


@dataclass(frozen=True)
class Culprit:
    key: Optional[str]  # the task that stopped the others; None: the evidence does not decide
    why: str  # "stopped", "user code", "behind", "inside TensorFlow", or what did not decide
    frame: Optional[Frame] = None  # the culprit's innermost user frame, when its stacks show one
    place: str = ""  # inside TensorFlow: where ("its input pipeline", "a save", ...; tfplace.py)
    others: str = ""  # inside TensorFlow: where the others wait ("a collective")
    detail: str = ""  # inside TensorFlow: the thread of TensorFlow's that tells, where no frame does;
    # behind: its count of TensorFlow calls and the next one's ("41 calls, the next 43")


def user_frames(text: str) -> list[Frame]:
    """The user frame each thread of these stacks sits in (threads in TensorFlow or idle: none)."""
    return [f for f in (in_user_code(t) for t in parse(text)) if f is not None]


def decide(keys: Sequence[str], stacks: Mapping[str, str], counts: Mapping[str, Optional[int]],
           stopped: Mapping[str, str]) -> Culprit:
    """Which of ``keys`` (the live tasks, in the plan's order) stopped the group.
    ``stacks``: each task's faulthandler text (absent: none came); ``counts``: its TensorFlow calls
    completed (None: it reports none); ``stopped``: a note for each stopped process."""
    halted = [k for k in keys if stopped.get(k)]
    if halted:
        return Culprit(halted[0], "stopped")
    frames = {k: user_frames(stacks[k]) for k in keys if k in stacks}
    common = set.intersection(*({(f.file, f.line, f.func) for f in fs} for fs in frames.values())) \
        if len(frames) > 1 else set()
    evidence = {k: [f for f in fs if (f.file, f.line, f.func) not in common] for k, fs in frames.items()}
    suspects = [k for k in keys if evidence.get(k)]
    behind, gap = _behind(suspects or list(keys), counts)
    if len(suspects) == 1:
        return Culprit(suspects[0], "user code", evidence[suspects[0]][0])
    if len(suspects) > 1 and behind is not None:
        return Culprit(behind, "user code", evidence[behind][0])
    odd = odd_one_out([k for k in keys if k in stacks], stacks) if not suspects else None
    blocked = odd is not None and bool(odd[1].detail)  # (3: a thread of TensorFlow's blocked in the kernel)
    if not suspects and behind is not None and not blocked and (odd is None or gap > NEAR):
        mine = counts[behind]
        return Culprit(behind, "behind", _first(frames.get(behind, ())),
                       detail=f"{mine} calls, the next {mine + gap}")
    if odd is not None:
        key, where, waiting = odd
        return Culprit(key, "inside TensorFlow", where.frame, where.place, waiting, where.detail)
    if suspects:
        return Culprit(None, f"{', '.join(suspects)} all sit in code of their own, none behind the others")
    if not frames:
        return Culprit(None, "no stacks came, and no task is behind the others")
    return Culprit(None, "every task waits inside TensorFlow or sits where the others do, none behind the others")


def _behind(keys: Sequence[str], counts: Mapping[str, Optional[int]]) -> tuple[Optional[str], int]:
    """The one task whose count is below every other's (of those that report one), or None; and by
    how many calls it is below the next."""
    known = sorted((c, k) for k in keys if (c := counts.get(k)) is not None)
    if len(known) < 2 or known[0][0] == known[1][0]:
        return None, 0
    return known[0][1], known[1][0] - known[0][0]


def _first(frames: Sequence[Frame]) -> Optional[Frame]:
    return frames[0] if frames else None
