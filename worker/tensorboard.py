"""TensorBoard scalars the worker writes, the one place they are written:

* ``model_dir/tensorboard/train``: the chief's training scalars at the end of every epoch, at
  the optimizer's global step -- ``loss`` and ``accuracy`` (the epoch's, as the
  ``tfcluster-epoch`` line prints them), ``examples_per_sec`` (over that epoch's steps) and
  ``learning_rate``. Other workers write nothing (their numbers are the same global ones).
* ``model_dir/tensorboard/eval``: the evaluator's ``loss`` and ``accuracy`` per checkpoint,
  at the checkpoint's global step.

The same tags at the same step axis in both runs, so TensorBoard draws train and eval loss in
one chart (``tfcluster tensorboard cluster.yaml``). Written with ``tf.summary.write`` and the
scalars plugin's metadata, which works with or without the ``tensorboard`` package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import tensorflow as tf
import tf_keras as keras
from tensorflow.core.framework import summary_pb2

from worker.cluster import TaskInfo
from worker.layout import Layout

# What tf.summary.scalar attaches: the scalars plugin's tag, so TensorBoard shows a chart.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")).SerializeToString()


class Scalars:
    """A scalar writer for one logdir; ``Scalars(None)`` writes nothing (non-chief workers).
    The directory is created on the first write."""

    def __init__(self, logdir: Optional[Path]) -> None:
        self.logdir = logdir
        self._writer = None

    @classmethod
    def train(cls, layout: Layout, task: TaskInfo) -> "Scalars":
        return cls(layout.tensorboard_train if task.is_chief else None)

    @classmethod
    def eval(cls, layout: Layout) -> "Scalars":
        return cls(layout.tensorboard_eval)

    def write(self, step: int, **values: float) -> None:
        if self.logdir is None:
            return
        if self._writer is None:
            # Outside any strategy scope and on the host: a plain local file writer.
            with tf.device("/cpu:0"):
                self._writer = tf.summary.create_file_writer(str(self.logdir))
        with self._writer.as_default(), tf.device("/cpu:0"):
            for tag, value in values.items():
                tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step),
                                 metadata=_SCALAR_METADATA)
        self._writer.flush()  # a SIGKILL later loses nothing written so far

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def learning_rate(optimizer) -> float:
    """The learning rate the optimizer's last step used (tf_keras keeps a schedule's current
    value in a variable; an optimizer that hands back the schedule gets it evaluated)."""
    lr = optimizer.learning_rate
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        lr = lr(optimizer.iterations)
    return float(keras.backend.get_value(lr))  # also a (mirrored, ps-held) variable
