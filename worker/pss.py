"""ParameterServerStrategy: the chief coordinates, ``worker`` and ``ps`` tasks serve.

* ``ps`` and ``worker`` tasks run ``tf.distribute.Server(...).join()``: they hold variables
  (ps) or run the steps the coordinator schedules (worker), and never exit on their own; the
  launcher stops them once the chief is done.
* The chief is the coordinator. ``--loop fit`` (default): tf_keras ``model.fit`` with a
  ``DatasetCreator``; ``--loop custom``: ``ClusterCoordinator.schedule``/``join`` with
  ``strategy.run`` in a ``tf.function``.
* Every step is one worker's batch of ``--batch-size`` (one replica per CPU worker); workers
  run steps concurrently and update the variables on the ps asynchronously.
* Fault tolerance: a dead worker's steps are rescheduled on the others and the worker rejoins
  when the launcher restarts it on its address. A dead ps or chief loses the job: the launcher
  restarts the cluster, and the chief resumes from ``BackupAndRestore`` (fit, per epoch: under
  PSS tf_keras skips its batch-level backups) or from ``tf.train.CheckpointManager`` (custom,
  every ``--save-freq`` steps).
* Checkpoints for the evaluator: ``model_dir/checkpoints/ckpt-NNN`` (fit, per epoch) and
  ``model_dir/checkpoints/custom/ckpt-N`` (custom, N = global step). The final model (saved by
  the chief) is a plain, unpartitioned Keras SavedModel that loads without a cluster.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import tensorflow as tf
import tf_keras as keras

from worker import data as data_lib
from worker import progress as progress_lib
from worker.cluster import TaskInfo
from worker.layout import Layout
from worker.model import build_cnn, gradient_step, per_example_loss
from worker.progress import Throughput, emit, epoch_end, fit_result
from worker.tensorboard import Scalars


def run_pss(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    if task.type in ("worker", "ps"):
        return run_server(task)
    if task.type != "chief":
        print(f"worker: error: task type {task.type!r} has no role under parameter_server "
              "(chief = coordinator, worker, ps, evaluator)", flush=True)
        return 2
    if args.loop == "custom":
        return run_custom(args, task, model_dir)
    return run_fit(args, task, model_dir)


# ------------------------------------------------------------------ servers


def run_server(task: TaskInfo) -> int:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=task.type,
        task_index=task.index,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    emit("server", task=task.key, target=server.target, time=f"{time.time():.3f}")
    server.join()  # never returns: the launcher stops servers when the chief is done
    return 0


# ------------------------------------------------------------------ chief: shared set-up


class CoordinatorEvents(logging.Handler):
    """Turns the coordinator's INFO/ERROR log records about worker failure and recovery into
    progress lines (``tfcluster-worker_lost``, ``tfcluster-worker_recovered``, ``tfcluster-ps_lost``),
    once per event, while the rest of TF's INFO logging stays hidden."""

    PATTERNS = (
        (re.compile(r"^Worker (/job:worker/replica:\d+/task:(\d+)\S*) failed with"), "worker_lost"),
        (re.compile(r"^Worker (/job:worker/replica:\d+/task:(\d+)\S*) has been recovered"), "worker_recovered"),
        (re.compile(r"^Parameter server failure detected at PS task (\d+)()"), "ps_lost"),
    )

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.lost: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # a malformed record must never break training
            return
        for rx, kind in self.PATTERNS:
            m = rx.search(msg)
            if not m:
                continue
            if kind == "ps_lost":
                emit(kind, task=f"ps:{m.group(1)}", time=f"{time.time():.3f}")
            else:
                key = f"worker:{m.group(2)}"
                if (kind == "worker_lost") == (key in self.lost):
                    return  # already reported (every in-flight step reports the same failure)
                (self.lost.add if kind == "worker_lost" else self.lost.discard)(key)
                emit(kind, task=key, time=f"{time.time():.3f}")
            return

    @classmethod
    def install(cls) -> None:
        logger = tf.get_logger()
        for handler in logger.handlers:
            if handler.level < logging.WARNING:
                handler.setLevel(logging.WARNING)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(cls())


def make_strategy(args: argparse.Namespace, task: TaskInfo) -> tf.distribute.ParameterServerStrategy:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    num_ps = len(task.cluster.get("ps", []))
    partitioner = None
    if args.partition_min_size_kb > 0:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=args.partition_min_size_kb * 1024, max_shards=num_ps)
    CoordinatorEvents.install()
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    print(f"worker: {task.key} coordinator: {len(task.cluster.get('worker', []))} worker(s), {num_ps} ps, "
          f"batch {args.batch_size} per step, partitioner "
          + (f"MinSizePartitioner({args.partition_min_size_kb} KiB, max_shards={num_ps})" if partitioner else "none"),
          flush=True)
    return strategy


def start_fields(strategy, task: TaskInfo, batch: int) -> dict:
    """What the start line reports: replicas per step (one worker's), the examples a step
    consumes (one worker's batch) and the workers running steps."""
    return progress_lib.start_fields("parameter_server", strategy, batch, workers=len(task.cluster.get("worker", [])))


def describe_partitioning(model: keras.Model) -> None:
    shards: dict[str, list[str]] = {}
    for v in model.weights:
        m = re.match(r"(.*)/part_(\d+):\d+$", v.name)
        if m:
            shards.setdefault(m.group(1), []).append(v.device)
    for name, devices in sorted(shards.items()):
        print(f"worker: partitioned {name} into {len(devices)} shards on {', '.join(sorted(set(devices)))}", flush=True)


def load_data(args: argparse.Namespace) -> data_lib.Data:
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()
    # Builds (offline digits) or downloads the dataset once, on the chief, before workers read it.
    return data_lib.load(args.dataset, args.data_dir, download=not args.no_download)


def make_dataset_fn(args: argparse.Namespace):
    """The per-worker input pipeline: traced on the coordinator, created on every worker."""

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = input_context.get_per_replica_batch_size(args.batch_size)
        data = data_lib.load(args.dataset, args.data_dir, download=False)
        ds = data.train.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return (ds.cache()
                .shuffle(data.num_train, seed=args.seed + input_context.input_pipeline_id,
                         reshuffle_each_iteration=True)
                .repeat()
                .batch(batch, drop_remainder=True)
                .prefetch(tf.data.AUTOTUNE))

    return dataset_fn


def evaluate_and_save(model: keras.Model, data: data_lib.Data, args: argparse.Namespace, final: Path) -> tuple:
    """Evaluate on the chief (exact, every test example once) with a plain copy of the model,
    and save that copy: a SavedModel that loads without a cluster or a partitioner."""
    loss, accuracy, plain = evaluate_plain(model, data, args)
    plain.save(str(final), save_format="tf")
    emit("saved", path=final)
    return loss, accuracy


def evaluate_plain(model: keras.Model, data: data_lib.Data, args: argparse.Namespace) -> tuple:
    """(loss, accuracy, copy): the test split evaluated on the chief with a plain copy of the
    model's current weights (also after every epoch with --epoch-eval). In a thread of its own:
    fit's callbacks run inside the strategy's scope, where the copy would be built on the ps and
    evaluated through the coordinator; a strategy scope holds only in the thread that entered it."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tfcluster-eval") as pool:
        return pool.submit(_evaluate_plain, model, data, args).result()


def _evaluate_plain(model: keras.Model, data: data_lib.Data, args: argparse.Namespace) -> tuple:
    assert not tf.distribute.has_strategy(), "evaluate_plain must run outside a strategy scope"
    plain = build_cnn(data.shape, data.num_classes, args.learning_rate)
    # Through a checkpoint: it stores partitioned variables as whole tensors (saved slices),
    # so it restores into the unpartitioned copy whatever the sharding was.
    tmp = tempfile.mkdtemp(prefix="tfcluster-weights-")
    try:
        prefix = tf.train.Checkpoint(model=model).write(os.path.join(tmp, "weights"))
        tf.train.Checkpoint(model=plain).read(prefix).assert_existing_objects_matched().expect_partial()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    loss, accuracy = plain.evaluate(data.test.batch(256), verbose=0)
    return loss, accuracy, plain


def steps_per_epoch(args: argparse.Namespace, data: data_lib.Data) -> int:
    return data_lib.steps_per_epoch(args.steps_per_epoch, data.num_train, args.batch_size)  # a step: one worker's batch


# ------------------------------------------------------------------ chief: model.fit


class PssProgress(keras.callbacks.Callback):
    """Progress lines under PSS. tf_keras refuses batch-level callbacks under PSS unless they
    accept RemoteValue logs (``_supports_tf_logs``); we never read the logs per batch, only the
    optimizer's step counter on the ps."""

    def __init__(self, every: int, batch: int, step_delay: float = 0.0, start_fields: dict | None = None,
                 evaluate=None, scalars: Scalars | None = None) -> None:
        super().__init__()
        self.evaluate = evaluate  # --epoch-eval: model -> (test loss, test accuracy) after every epoch
        self.scalars = scalars
        self.start_fields = dict(start_fields or {})
        self._supports_tf_logs = True
        self.every = max(1, every)
        self.batch = batch
        self.step_delay = step_delay
        self._epoch = 0
        self._emitted = 0
        self._started = False
        self.first_step_time = None
        self.start_global = 0  # the optimizer's step when this attempt began (a resume starts past 0)
        self.last_global = 0
        self.throughput = Throughput(batch)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._emitted = 0

    def on_train_batch_begin(self, batch, logs=None):
        if not self._started:
            self._started = True
            g = self.start_global = int(self.model.optimizer.iterations.numpy())
            emit("start", epoch=self._epoch, step=batch, global_step=g, time=f"{time.time():.3f}", **self.start_fields)

    def on_train_batch_end(self, batch, logs=None):
        if self.first_step_time is None:
            # Steps are asynchronous: wait for the first one to finish so the timing is real.
            self.model._cluster_coordinator.join()
            self.first_step_time = time.time()
            self.throughput.mark(int(self.model.optimizer.iterations.numpy()), self.first_step_time)
            emit("first_step", epoch=self._epoch, step=batch, global_step=int(self.model.optimizer.iterations.numpy()),
                 time=f"{self.first_step_time:.3f}")
        # ``batch`` is the last step of the execution (several with --steps-per-execution).
        if (batch + 1) // self.every > self._emitted:
            self._emitted = (batch + 1) // self.every
            emit("step", epoch=self._epoch, step=batch + 1,
                 global_step=int(self.model.optimizer.iterations.numpy()), time=f"{time.time():.3f}")
        if self.step_delay > 0:
            time.sleep(self.step_delay)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.last_global = int(self.model.optimizer.iterations.numpy())  # exact: fit joined
        self.throughput.mark(self.last_global)
        tested = {}
        if self.evaluate is not None:
            test_loss, test_accuracy = self.evaluate(self.model)
            tested = {"test_loss": f"{test_loss:.4f}", "test_accuracy": f"{test_accuracy:.4f}"}
        epoch_end(epoch + 1, self.last_global, float(logs.get("loss", float("nan"))),
                  float(logs.get("accuracy", float("nan"))), self.throughput, self.model.optimizer, self.scalars,
                  extra=tested)

    def examples_per_sec(self) -> float:
        return self.throughput.rate()

    @property
    def steps_run(self) -> int:
        """Steps trained in this attempt (exact after fit: the last epoch end joined)."""
        return max(0, self.last_global - self.start_global)


def run_fit(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy = make_strategy(args, task)
    data = load_data(args)
    steps = steps_per_epoch(args, data)
    p = Layout(model_dir)
    if args.save_freq != "epoch":
        print("worker: note: under parameter_server tf_keras BackupAndRestore backs up per epoch only; "
              "use --loop custom for step-granular checkpoints", flush=True)
    with strategy.scope():
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)
        if args.steps_per_execution > 1:
            model.compile(optimizer=model.optimizer, loss=model.loss, metrics=["accuracy"],
                          steps_per_execution=args.steps_per_execution)
    describe_partitioning(model)
    progress = PssProgress(args.progress_every, args.batch_size, args.step_delay * args.steps_per_execution,
                           start_fields={**start_fields(strategy, task, args.batch_size),
                                         "epochs": args.epochs, "steps_per_epoch": steps},
                           evaluate=(lambda m: evaluate_plain(m, data, args)[:2]) if args.epoch_eval else None,
                           scalars=Scalars.train(p, task))
    callbacks = [
        # Kept until the final model is saved (removed below): a failure in the final evaluation
        # or save resumes at the end, not at step 0 (as sync.py's fit).
        keras.callbacks.BackupAndRestore(backup_dir=str(p.backup), delete_checkpoint=False),
        keras.callbacks.ModelCheckpoint(filepath=p.fit_checkpoint(), save_weights_only=True),
        progress,
    ]
    history = model.fit(
        keras.utils.experimental.DatasetCreator(make_dataset_fn(args)),
        epochs=args.epochs,
        steps_per_epoch=steps,
        callbacks=callbacks,
        verbose=0,
    )
    global_step = int(model.optimizer.iterations.numpy())
    loss, accuracy = evaluate_and_save(model, data, args, p.final)
    shutil.rmtree(p.backup, ignore_errors=True)  # the chief: the only PSS task that writes it
    fit_result(task.key, args.epochs, history, progress, loss, accuracy, global_step=global_step)
    return 0


# ------------------------------------------------------------------ chief: custom loop


def run_custom(args: argparse.Namespace, task: TaskInfo, model_dir: Path) -> int:
    tf.keras.utils.set_random_seed(args.seed)
    strategy = make_strategy(args, task)
    data = load_data(args)
    per_epoch = steps_per_epoch(args, data)
    total_steps = args.epochs * per_epoch
    save_every = per_epoch if args.save_freq == "epoch" else int(args.save_freq)
    batch = args.batch_size

    with strategy.scope():
        model = build_cnn(data.shape, data.num_classes, args.learning_rate)
        optimizer = model.optimizer
        train_accuracy = keras.metrics.SparseCategoricalAccuracy()
        loss_sum = tf.Variable(0.0, dtype=tf.float32, trainable=False)
        loss_count = tf.Variable(0.0, dtype=tf.float32, trainable=False)
    describe_partitioning(model)
    loss_fn = per_example_loss()

    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    dataset_fn = make_dataset_fn(args)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def train_step(iterator):
        def replica_fn(inputs):
            images, labels = inputs
            loss = gradient_step(model, loss_fn, train_accuracy, images, labels, batch)
            loss_sum.assign_add(loss)
            loss_count.assign_add(1.0)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    p = Layout(model_dir)
    ckpt_dir = p.custom_checkpoints
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, str(ckpt_dir), max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).expect_partial()
        print(f"worker: restored {manager.latest_checkpoint}", flush=True)

    def save(step: int) -> None:
        path = manager.save(checkpoint_number=step)
        emit("checkpoint", global_step=step, path=path)

    global_step = int(optimizer.iterations.numpy())
    epoch, step_in_epoch = divmod(global_step, per_epoch)
    emit("start", epoch=epoch, step=step_in_epoch, global_step=global_step, time=f"{time.time():.3f}",
         **start_fields(strategy, task, batch), epochs=args.epochs, steps_per_epoch=per_epoch)
    start_global = global_step
    scalars = Scalars.train(p, task)
    train_loss = train_acc = float("nan")
    first_step_time = None
    throughput = Throughput(batch)
    scheduled = global_step
    # Schedule up to each boundary (progress line, epoch, checkpoint, end), then join: the
    # counter read after a join is exact, and a checkpoint holds every step before it.
    while global_step < total_steps:
        if first_step_time is None:
            target = global_step + 1
        else:
            nxt = [total_steps, (global_step // per_epoch + 1) * per_epoch,
                   (global_step // save_every + 1) * save_every,
                   (global_step // args.progress_every + 1) * args.progress_every]
            target = min(nxt)
        for _ in range(target - scheduled):
            coordinator.schedule(train_step, args=(per_worker_iterator,))
            if args.step_delay > 0:
                time.sleep(args.step_delay)
        scheduled = target
        coordinator.join()
        global_step = int(optimizer.iterations.numpy())
        if global_step != scheduled:
            # The optimizer's counter is the source of truth (it is what checkpoints restore).
            print(f"worker: note: optimizer.iterations={global_step} after {scheduled} scheduled steps", flush=True)
            scheduled = global_step
        throughput.mark(global_step)
        if first_step_time is None:
            first_step_time = time.time()
            emit("first_step", epoch=(global_step - 1) // per_epoch, step=(global_step - 1) % per_epoch,
                 global_step=global_step, time=f"{first_step_time:.3f}")
        if global_step % args.progress_every == 0:
            emit("step", epoch=(global_step - 1) // per_epoch, step=(global_step - 1) % per_epoch + 1,
                 global_step=global_step, time=f"{time.time():.3f}")
        if global_step % per_epoch == 0 or global_step >= total_steps:
            n = float(loss_count.numpy())
            train_loss = float(loss_sum.numpy()) / n if n else float("nan")
            train_acc = float(train_accuracy.result())
            tested = {}
            if args.epoch_eval:
                test_loss, test_accuracy = evaluate_plain(model, data, args)[:2]
                tested = {"test_loss": f"{test_loss:.4f}", "test_accuracy": f"{test_accuracy:.4f}"}
            epoch_end(math.ceil(global_step / per_epoch), global_step, train_loss, train_acc, throughput, optimizer,
                      scalars, extra=tested)
            train_accuracy.reset_states()
            loss_sum.assign(0.0)
            loss_count.assign(0.0)
        if global_step % save_every == 0 or global_step >= total_steps:
            save(global_step)

    rate = throughput.rate()
    loss, accuracy = evaluate_and_save(model, data, args, p.final)
    emit("result", task=task.key, epochs=args.epochs, steps_run=global_step - start_global, global_step=global_step,
         examples_per_sec=f"{rate:.1f}", accuracy=f"{accuracy:.4f}", loss=f"{loss:.4f}",
         train_loss=f"{train_loss:.4f}", train_accuracy=f"{train_acc:.4f}")
    return 0
