"""Where a task waits inside TensorFlow, from its stacks, pure: when every task of a stalled group
waits inside TensorFlow (launcher/supervise/stuck.py's last resort), the one that waits somewhere
else than the others stopped them.

A task's place is read from its main thread's Python frames (faulthandler's, the thread that runs
the script's ``<module>``), innermost first, the first of these that a frame tells:

* its input pipeline: ``tensorflow/python/data`` (an iterator's creation, ``next`` or teardown),
  ``distribute/input_lib``, Keras's data adapters;
* a save: ``tensorflow/python/checkpoint``, ``saved_model``, Keras's ``saving``;
* an evaluation: Keras's ``evaluate``;
* a callback: Keras's callbacks module;
* a collective: ``collective_ops``, ``cross_device_ops`` (an eager all-reduce);

else, a thread inside a ``tf.function`` (a Keras ``fit`` step, a custom loop's step) is in its
step, which a collective inside it keeps waiting as long as one peer is missing: a task in a
collective or its step *waits*; any other place is the odd one out. Where every task is in its
step, a thread of TensorFlow's own (``tf_*``: its compute and data threads) blocked in the kernel
in something else than a lock, a poll or a sleep -- reading a file, opening a FIFO -- is the one
that tells (``THREADS``: the lines launcher/backends/pyspy.py's ``thread_states`` adds after the
stacks, from /proc), unless every task shows the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from launcher.record.stacks import Frame, Thread, parse

INPUT, SAVE, EVALUATION, CALLBACK, COLLECTIVE, STEP = (
    "its input pipeline", "a save", "an evaluation", "a callback", "a collective", "its step")
WAITING = (COLLECTIVE, STEP)
_THEIRS = {COLLECTIVE: "a collective", STEP: "their step (its collective waits for this task)"}
_KERAS = r"/(?:tf_keras|keras)/src/"
_PLACES: tuple[tuple[str, re.Pattern, Optional[str]], ...] = (
    (INPUT, re.compile(r"/tensorflow/python/data/|/tensorflow/python/distribute/input_lib|"
                       + _KERAS + r"(?:engine/data_adapter|trainers/data_adapters|utils/dataset_utils)"), None),
    (SAVE, re.compile(r"/tensorflow/python/(?:checkpoint|saved_model)/|/tensorflow/python/training/"
                      r"(?:saver|checkpoint_management)|" + _KERAS + r"saving/"), None),
    (EVALUATION, re.compile(_KERAS + r"(?:engine|trainers)/"), r"evaluate"),
    (CALLBACK, re.compile(_KERAS + r"callbacks"), None),
    (COLLECTIVE, re.compile(r"/tensorflow/python/ops/collective_ops|/tensorflow/python/distribute/"
                            r"(?:cross_device_ops|cross_device_utils|collective_util)"), None),
)
_STEP = re.compile(r"/tensorflow/python/eager/(?:polymorphic_function/|execute|context)")
# faulthandler's text is followed by these lines (launcher/backends/pyspy.py, thread_states).
THREADS = "threads of TensorFlow (from /proc: name, system call, kernel wait):"
_THREAD = re.compile(r"^\s+tid (\d+) (\S+): syscall (\S+) in (\S+)\s*$")
# Kernel waits that say nothing: a lock or condition variable, a poll, a sleep, a signal wait.
_IDLE = ("futex", "ep_poll", "do_epoll", "poll_schedule", "do_select", "core_sys_select", "hrtimer_nanosleep",
         "do_nanosleep", "do_sigtimedwait", "sigsuspend", "0")


@dataclass(frozen=True)
class Where:
    place: str
    frame: Optional[Frame] = None  # the Python frame that tells
    detail: str = ""  # or, for a thread blocked in the kernel: which and where


def main_thread(threads: Sequence[Thread]) -> Optional[Thread]:
    """The thread that runs the script (its ``<module>`` frame), else None."""
    return next((t for t in threads if any(f.func == "<module>" for f in t.frames)), None)


def python_place(thread: Thread) -> Optional[Where]:
    """The place the thread's frames tell (innermost first), its step, or None (outside TensorFlow)."""
    step = None
    for frame in thread.frames:
        for place, pattern, func in _PLACES:
            if pattern.search(frame.file) and (func is None or frame.func == func):
                return Where(place, frame)
        if step is None and _STEP.search(frame.file):
            step = frame
    return Where(STEP, step) if step is not None else None


def blocked_threads(text: str) -> list[tuple[str, str, str, str]]:
    """(tid, name, syscall, kernel wait) of each TensorFlow thread blocked in the kernel in
    something else than a lock, a poll or a sleep."""
    out = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m and m.group(2).startswith("tf_") and not m.group(4).startswith(_IDLE):
            out.append(m.groups())
    return out


def place_of(text: str) -> Optional[Where]:
    """Where the task of these stacks waits inside TensorFlow, or None (not there, or no stacks)."""
    main = main_thread(parse(text))
    return python_place(main) if main is not None else None


def odd_one_out(keys: Sequence[str], stacks: Mapping[str, str]) -> Optional[tuple[str, Where, str]]:
    """(task, where it is, where the others wait) for the one task of ``keys`` that waits inside
    TensorFlow somewhere else than every other, which all wait in a collective or their step;
    None where that is not so (two odd ones, or none, or a task outside TensorFlow)."""
    places = {k: place_of(stacks[k]) for k in keys if k in stacks}
    if len(places) < 2:
        return None
    # (a main thread without frames -- blocked in C where faulthandler sees none -- has no place)
    odd = [k for k, w in places.items() if w is not None and w.place not in WAITING]
    waiting = sorted({_THEIRS[w.place] for k, w in places.items() if w is not None and k not in odd})
    if len(odd) == 1 and waiting and all(w is not None for w in places.values()):
        return odd[0], places[odd[0]], " or ".join(waiting)
    if odd:
        return None
    blocked = {k: blocked_threads(stacks[k]) for k in places}
    common = set.intersection(*({(name, wait) for _, name, _, wait in b} for b in blocked.values()))
    telling = {k: [b for b in found if (b[1], b[3]) not in common] for k, found in blocked.items()}
    alone = [k for k, found in telling.items() if found]
    if len(alone) != 1:
        return None
    tid, name, call, wait = telling[alone[0]][0]
    where = places[alone[0]]
    return alone[0], Where(INPUT, where.frame if where is not None else None,
                           f"TensorFlow's thread {name} (tid {tid}) blocked in system call {call} "
                           f"(kernel wait {wait})"), _THEIRS[STEP]
