"""Resuming a backup with a different number of workers (an elastic MWMS group that
shrinks when a host is lost and grows back when it returns). No TensorFlow here.

The per-replica batch (``--batch-size``) stays, so the global batch follows the replica count,
and so does the epoch's length: by default an epoch is one pass over the training split,
``ceil(num_train / global_batch)`` steps (23 at 2 x 32 on digits, 45 at 1 x 32). A backup
written at "epoch 1, 6 steps done" by 2 workers is therefore not "epoch 1, step 6" for 1
worker: that would make epoch 1 6 x 64 + 39 x 32 examples long, and a backup written 41 steps
into a 45-step epoch would be past the end of a 23-step one (tf_keras then runs an empty epoch
and fails with "Unexpected result of `train_function` (Empty logs)").

Both loops therefore store the global batch and steps per epoch a backup was written with,
and a resume converts the position in the interrupted epoch by the examples it had consumed:
``done x old global batch // new global batch`` steps (rounded down: an uneven split repeats
less than one new step's examples rather than skip any). When the steps per epoch did not
change (``--steps-per-epoch N`` given, or the same global batch) the position is kept as it
is. The global step (the optimizer's iterations, what the progress lines call ``global_step``)
is never converted: it counts the updates made, whatever their size.
"""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    epoch: int  # 0-based epoch in progress
    done: int  # steps done in that epoch


def resume_position(epoch: int, done: int, old_batch: int, old_steps: int, new_batch: int,
                    new_steps: int) -> Position:
    """Where to resume: ``done`` steps of ``epoch`` were made at ``old_batch`` examples a step in
    epochs of ``old_steps`` steps; the new attempt makes ``new_batch`` a step in epochs of
    ``new_steps``. ``old_batch``/``old_steps`` <= 0 means unknown (a backup written before
    they were recorded): the position is taken as it is. A finished epoch (``done`` equal to
    its steps) resumes at the start of the next one."""
    if old_batch <= 0 or old_steps <= 0 or old_steps == new_steps:
        old_steps = old_steps if old_steps > 0 else new_steps
        if done >= old_steps:
            return Position(epoch + 1, 0)
        return Position(epoch, min(done, new_steps - 1))
    if done >= old_steps:
        return Position(epoch + 1, 0)
    # (old_steps - 1) x old_batch < num_train <= new_steps x new_batch when both are one pass,
    # so this is below new_steps; the min only guards an --steps-per-epoch changed between runs.
    return Position(epoch, min(done * old_batch // new_batch, new_steps - 1))


def describe(old_batch: int, old_steps: int, before: Position, new_batch: int, new_steps: int,
             after: Position) -> str:
    """The worker's log line when a backup is resumed at a different global batch."""
    return (f"worker: resuming a backup written at global batch {old_batch} ({old_steps} steps/epoch) at global "
            f"batch {new_batch} ({new_steps} steps/epoch): epoch {before.epoch} with {before.done} step(s) done "
            f"-> epoch {after.epoch} with {after.done} step(s) done (as many of its examples, rounded down to whole "
            f"steps)")
