"""The parameter_server chief (the coordinator): what both of its loops share -- the strategy and
the coordinator's failure lines (``CoordinatorEvents``), the dataset (loaded once on the chief,
a pipeline per worker), the partitioning said, the exact evaluation with a plain copy of the
model and the final save. The loops are fit.py (``model.fit``) and custom.py
(``ClusterCoordinator``); the package's __init__ says which runs."""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
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
from worker.model import build_cnn
from worker.progress import emit


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
