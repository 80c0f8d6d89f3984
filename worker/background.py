"""Backups written beside training instead of in its way.

A backup stops every worker for as long as it takes: the variables are read (under
MultiWorkerMirroredStrategy a sync-on-read variable's read is an all-reduce, so every worker
takes part) and the files written, while the next step waits on the slowest. TensorFlow's
asynchronous checkpoint (``tf.train.CheckpointOptions(enable_async=True)``,
tensorflow/python/checkpoint/async_checkpoint_helper.py) splits the two: the caller's thread
copies the variables into host-memory copies (the reads and their collectives stay in the
training thread, in the same order on every worker) and one background thread writes the copies.
Training goes on once the copy is made.

What stays as it was:

* A backup is complete or absent: ``tf.train.CheckpointManager`` records a checkpoint in its
  ``checkpoint`` state file from the background thread only after its files are written (the
  write's callbacks), so a task killed mid-write resumes from the backup before. That is the one
  cost: a crash while a write is in flight redoes up to ``save_freq`` steps more (the next backup
  waits for the previous write, so at most one is in flight).
* A write's error surfaces at the next backup (TensorFlow raises it there; at the process's
  exit its exit hook logs it).
* A backup that ends the process (a preemption's agreed save) or the last one before the final
  model is written synchronously: ``save(..., wait=True)``, ``finish``.

The writer's checkpoint is its own ``tf.train.Checkpoint`` over the same objects as the one
restored from (TensorFlow's helper builds its background copy from a checkpoint's constructor
arguments only, so objects attached to a checkpoint later would be left out of the files), and
its checkpoints are numbered by the global step, so that a number never comes back within a run
(a restarted attempt's counter would start again at 1, and write over a backup it may still need).
"""

from __future__ import annotations

import shutil
from typing import Optional

import tensorflow as tf

# The one option that makes a save asynchronous (TensorFlow 2.21: eager mode only; under a
# tf.function or in graph mode TensorFlow writes synchronously and says so).
ASYNC = tf.train.CheckpointOptions(enable_async=True)


class BackgroundWriter:
    """Writes one directory's backups of ``items`` (a ``tf.train.Checkpoint``'s keyword
    arguments) in TensorFlow's background thread; keeps ``max_to_keep`` of them. ``temporary``:
    the directory only exists because every worker must take part in a save (a worker that is
    not the chief, on a shared state dir): removed by ``finish``, once nothing writes there."""

    def __init__(self, directory: str, items: dict, *, max_to_keep: int = 1, temporary: bool = False,
                 save_counter: Optional[tf.Variable] = None) -> None:
        self.directory = directory
        self.temporary = temporary
        self.checkpoint = tf.train.Checkpoint(**items)
        if save_counter is not None:  # (numbered by step; kept only so the counter is never behind)
            self.checkpoint.save_counter.assign(save_counter)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory=directory, max_to_keep=max_to_keep)

    def save(self, global_step: int, *, wait: bool = False) -> Optional[str]:
        """Back up now, numbered ``global_step``; returns once training may go on (``wait``:
        once the files are written). A previous write still in flight is waited for first."""
        if wait:
            self.manager.sync()  # the write in flight first: then this one is the newest
            return self.manager.save(checkpoint_number=global_step)
        return self.manager.save(checkpoint_number=global_step, options=ASYNC)

    def finish(self) -> None:
        """Wait for the write in flight; a temporary directory goes."""
        self.manager.sync()
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)
