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

This module says which role a task plays and runs the servers; the chief's shared set-up is
chief.py, its loops fit.py and custom.py.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import tensorflow as tf

from worker.cluster import TaskInfo
from worker.progress import emit
from worker.pss.custom import run_custom
from worker.pss.fit import run_fit


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
