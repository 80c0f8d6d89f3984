"""MultiWorkerMirroredStrategy training with Keras ``model.fit``.

Fault tolerance: ``BackupAndRestore`` (every epoch, or every N steps) lets a restarted group
resume where it stopped. ``ModelCheckpoint`` is written by the chief only (tf_keras sends
other workers' copies to temporary directories and removes them). A SIGTERM saves the step
all workers agree on and exits 143: preemption loses no step (preemption.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import tensorflow as tf
import tf_keras as keras

from . import data as data_lib
from .cluster import TaskInfo
from .model import build_cnn
from .preemption import PREEMPTED_EXIT, Preempted, PreemptionFlag, SaveOnPreemption
from .progress import ProgressLogger, emit


class StepDelay(keras.callbacks.Callback):
    """Sleep per step: slows the demo down for fault-injection tests and live demos."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.seconds)


def paths(model_dir: Path) -> dict[str, Path]:
    return {
        "backup": model_dir / "backup",
        "checkpoints": model_dir / "checkpoints",
        "final": model_dir / "final_model",
        "tensorboard": model_dir / "tensorboard",
    }


def save_final_model(model: keras.Model, target: Path, task: TaskInfo) -> None:
    """Every worker must take part in saving (it runs collectives); only the chief's copy is kept."""
    if task.is_chief:
        model.save(str(target), save_format="tf")
        emit("saved", path=target)
        return
    tmp = tempfile.mkdtemp(prefix=f"tfcluster-{task.type}-{task.index}-")
    try:
        model.save(tmp, save_format="tf")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_mwms(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    if args.loop == "custom":
        from .custom_loop import run_mwms_custom

        return run_mwms_custom(args, task, model_dir)
    tf.keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    flag = None if args.no_graceful_preemption else PreemptionFlag()
    if flag is not None:
        flag.install()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    print(f"worker: {task.key} in a cluster of {task.num_workers} worker(s), {replicas} replica(s), "
          f"global batch {global_batch}", flush=True)

    pipes = data_lib.training_pipelines(args, global_batch)
    data, train, test, steps = pipes.data, pipes.train, pipes.test, pipes.steps_per_epoch

    p = paths(model_dir)
    with strategy.scope():
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)

    progress = ProgressLogger(every=args.progress_every, global_batch=global_batch)
    backup = keras.callbacks.BackupAndRestore(
        backup_dir=str(p["backup"]),
        # Always a step count ("epoch" = one epoch's steps): then a restore resumes inside an
        # epoch, which a preemption save needs; with "epoch" tf_keras would skip the rest of it.
        save_freq=steps if args.save_freq == "epoch" else args.save_freq,
        delete_checkpoint=True,
        # Not save_before_preemption: tf_keras enables it only on GCP, detected by
        # querying the GCE metadata server from every worker.
    )
    callbacks = [backup]
    if flag is not None:
        callbacks.append(SaveOnPreemption(backup, flag))
    callbacks += [
        keras.callbacks.ModelCheckpoint(
            filepath=str(p["checkpoints"] / "ckpt-{epoch:03d}"),
            save_weights_only=True,
        ),
        progress,
    ]
    if args.step_delay > 0:
        callbacks.append(StepDelay(args.step_delay))
    try:
        history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    except Preempted:
        return PREEMPTED_EXIT
    loss, accuracy = model.evaluate(test, verbose=0)
    save_final_model(model, p["final"], task)
    epochs_run = len(history.history.get("loss", []))
    emit(
        "result",
        task=task.key,
        epochs=args.epochs,
        epochs_run=epochs_run,
        steps_run=progress.steps_run,
        examples_per_sec=f"{progress.examples_per_sec():.1f}",
        accuracy=f"{accuracy:.4f}",
        loss=f"{loss:.4f}",
        # The last epoch's training metrics as History recorded them (what every callback saw).
        train_loss=f"{history.history.get('loss', [float('nan')])[-1]:.4f}",
        train_accuracy=f"{history.history.get('accuracy', [float('nan')])[-1]:.4f}",
    )
    return 0
