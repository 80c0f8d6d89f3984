"""How a stop waits for tasks to end (Tasks.stop): until each has exited, or its time is up, or
every one left has said its agreed save is written and had SAVED_LINGER more."""

from __future__ import annotations

import time
from typing import Callable, Optional

# How long a task that said its agreed save is written still gets to exit before SIGKILL: what is
# left is its process's teardown, which TensorFlow can hold for seconds (a dataset iterator's
# destructor waits for tf.data's autotuning thread). The reference worker exits 0.05-0.3 s after
# its saved line; a regroup of a soak waited the whole stop_grace (10 s) in 3 of 4 for one that
# did not, every save written.
SAVED_LINGER = 0.5


def still_running(handles: list, seconds: float, every: float,
                  saved: Optional[Callable[[str], bool]] = None) -> list:
    """Those of ``handles`` still running after at most ``seconds`` (polled every ``every`` s), or
    SAVED_LINGER after every one still running is ``saved``."""
    end = time.monotonic() + seconds
    while handles and time.monotonic() < end:
        time.sleep(every)
        handles = [h for h in handles if h.poll() is None]
        if saved is not None and handles and all(saved(h.key) for h in handles):
            end = min(end, time.monotonic() + SAVED_LINGER)
    return handles
