"""The evaluator sidecar (``evaluator`` task, both strategies): evaluate every new checkpoint.

Watches ``model_dir/checkpoints`` (``--loop fit``: tf_keras ``ModelCheckpoint`` weights
``ckpt-NNN``, NNN = epoch) or ``model_dir/checkpoints/custom`` (``--loop custom``:
``tf.train.CheckpointManager`` checkpoints ``ckpt-N``, N = global step), loads each one written
after this evaluator started into a plain (undistributed) copy of the model, evaluates it on
the test split, and writes

* a line per checkpoint: ``tfcluster-eval checkpoint=ckpt-002 global_step=40 loss=... accuracy=...``
* TensorBoard scalars ``loss`` and ``accuracy`` at the checkpoint's global step in
  ``model_dir/tensorboard/eval``.

Checkpoints present before it started (earlier runs, earlier attempts) are skipped. It exits 0
after evaluating the final checkpoint (the one for ``--epochs``: fit's ``ckpt-<epochs>``; the
custom loop's that records epoch ``--epochs``, whatever its global step), after ``--eval-timeout``
seconds without a new checkpoint, or on SIGTERM (which the launcher sends when training has
succeeded) once it has evaluated the checkpoints already written: the final one is not lost
to a race with the chief's exit.

Like ``tf_keras.utils.SidecarEvaluator`` (which we do not use: it only ever evaluates the
latest checkpoint, so a fast trainer's intermediate and final checkpoints can be skipped, and
it cannot tell which checkpoint is the last one).
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from pathlib import Path

from worker.cluster import TaskInfo
from worker.layout import Layout

_CKPT = re.compile(r"^ckpt-(\d+)\.index$")
_POLL = 1.0
_SETTLE = 0.5  # seconds an .index file must be unchanged before we read the checkpoint


def scan(directory: Path) -> dict[str, tuple[int, int]]:
    """{prefix path: (number, index mtime_ns)} of the checkpoints in ``directory``."""
    found = {}
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return found
    for entry in entries:
        m = _CKPT.match(entry.name)
        if m:
            try:
                found[str(entry.with_suffix(""))] = (int(m.group(1)), entry.stat().st_mtime_ns)
            except FileNotFoundError:
                continue  # removed by CheckpointManager's max_to_keep meanwhile
    return found


def final_number(args: argparse.Namespace, task: TaskInfo, num_train: int) -> int:
    """The number in the last checkpoint's name: the epoch count (fit), or the total steps (custom)."""
    if args.loop != "custom":
        return args.epochs
    from worker.data import steps_per_epoch

    if args.strategy == "parameter_server":
        per_step = args.batch_size  # one worker's batch per step
    else:
        # One replica per worker, as on CPUs. With several GPUs per worker the chief's global
        # batch is larger, the final checkpoint is not recognised here, and the evaluator ends
        # at the launcher's SIGTERM (after evaluating what was written) or --eval-timeout.
        per_step = args.batch_size * max(1, task.num_workers)
    return args.epochs * steps_per_epoch(args.steps_per_epoch, num_train, per_step)


# The custom loop's checkpoints record the epoch in progress (worker/sync.py): training is over
# when it reaches --epochs. A group resumed with another number of workers ends at another global
# step than epochs x steps per epoch at this evaluator's worker count, so the number alone can say
# "final" too early (after a grow) or never (after a shrink).
EPOCH_KEY = "epoch/.ATTRIBUTES/VARIABLE_VALUE"


def is_final(number: int, last: int, recorded_epoch: int | None, epochs: int) -> bool:
    """Whether checkpoint ``number`` is the last one: by the epoch it records when it records
    one, else by its number (``final_number``)."""
    if recorded_epoch is not None:
        return recorded_epoch >= epochs
    return number >= last


class Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if not self.requested:
            self.requested = True
            print("worker: evaluator: SIGTERM: evaluating the checkpoints already written, then exiting", flush=True)


def run_evaluator(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    layout = Layout(model_dir)
    watch = layout.checkpoint_dir(args.loop)
    baseline = scan(watch)  # before TF's slow import: the chief cannot have saved anything yet
    stop = Stop()
    signal.signal(signal.SIGTERM, stop)

    import tensorflow as tf
    import tensorflow_datasets as tfds

    from worker import data as data_lib
    from worker.model import build_cnn
    from worker.progress import emit

    tfds.disable_progress_bar()
    data = data_lib.load(args.dataset, args.data_dir, download=not args.no_download)
    test = data.test.batch(256).cache()
    model = build_cnn(data.shape, data.num_classes, args.learning_rate)
    last = final_number(args, task, data.num_train)
    from worker.tensorboard import Scalars

    scalars = Scalars.eval(layout)
    final_name = layout.checkpoint_name(args.loop, last)
    if args.loop == "custom":  # the number is only the fallback: see is_final
        final_name = f"the one recording epoch {args.epochs}, else {final_name}"
    print(f"worker: evaluator watching {watch} (final checkpoint: {final_name}, "
          f"{len(baseline)} earlier checkpoint(s) skipped, timeout {args.eval_timeout:g} s)", flush=True)

    def evaluate(prefix: str, number: int) -> int | None:
        """Evaluate one checkpoint; the epoch it records (custom loop), if it records one."""
        names = {name for name, _ in tf.train.list_variables(prefix)}
        if any(n.startswith("model/") for n in names):  # tf.train.Checkpoint(model=..., optimizer=...)
            tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(prefix).expect_partial()
        else:  # model.save_weights / ModelCheckpoint(save_weights_only=True)
            model.load_weights(prefix).expect_partial()
        step_key = next((n for n in ("optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
                                     "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
                                     "optimizer/iterations/.ATTRIBUTES/VARIABLE_VALUE") if n in names), None)
        global_step = int(tf.train.load_variable(prefix, step_key)) if step_key else number
        loss, accuracy = model.evaluate(test, verbose=0)
        scalars.write(global_step, loss=loss, accuracy=accuracy)
        emit("eval", checkpoint=Path(prefix).name, global_step=global_step, loss=f"{loss:.4f}",
             accuracy=f"{accuracy:.4f}", time=f"{time.time():.3f}")
        return int(tf.train.load_variable(prefix, EPOCH_KEY)) if EPOCH_KEY in names else None

    done: dict[str, int] = {}  # prefix -> mtime_ns evaluated
    evaluated = 0
    last_new = time.monotonic()
    while True:
        stopping = stop.requested
        now_ns = time.time_ns()
        pending = sorted(
            ((number, prefix, mtime) for prefix, (number, mtime) in scan(watch).items()
             if baseline.get(prefix) != (number, mtime) and done.get(prefix) != mtime
             and (stopping or now_ns - mtime > _SETTLE * 1e9)),
        )
        for number, prefix, mtime in pending:
            recorded_epoch = None
            try:
                recorded_epoch = evaluate(prefix, number)
            except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as exc:
                if Path(prefix + ".index").exists() and not stopping:
                    print(f"worker: evaluator: {Path(prefix).name} not readable yet ({type(exc).__name__}); retrying",
                          flush=True)
                    continue
                print(f"worker: evaluator: {Path(prefix).name} skipped: {exc}", flush=True)
            done[prefix] = mtime
            evaluated += 1
            last_new = time.monotonic()
            if is_final(number, last, recorded_epoch, args.epochs):
                emit("eval_done", reason="final", checkpoint=Path(prefix).name, evaluated=evaluated)
                return 0
        if stopping:
            emit("eval_done", reason="stopped", evaluated=evaluated)  # SIGTERM: training is over
            return 0
        if time.monotonic() - last_new > args.eval_timeout:
            emit("eval_done", reason="timeout", timeout=f"{args.eval_timeout:g}", evaluated=evaluated)
            return 0
        time.sleep(_POLL)
