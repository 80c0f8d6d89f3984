"""``tfcluster-worker`` (the same as ``python -m worker``): the reference training entrypoint
tfcluster starts on every task.

The strategy comes from ``--strategy`` ($TFCLUSTER_STRATEGY, set by tfcluster), the role from
TF_CONFIG: under the synchronous strategies (sync.py) every chief/worker trains; under
parameter_server (pss.py) the chief coordinates and the ps/worker tasks serve; an evaluator
task runs the sidecar evaluator. Exit codes: 0 done, 2 bad flags, TF_CONFIG or no TPU
(permanent: the launcher will not retry), 143 preempted (saved; retryable), anything else an
unexpected failure.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

from launcher.contract import envnames, liveness
from launcher.contract.exitsync import exit_together
from launcher.contract.progress import report
from launcher.contract.portcheck import check_task_port

from worker.cluster import ConfigError, task_from_env
from worker.output import outlive_reader

STRATEGIES = ("multi_worker_mirrored", "parameter_server", "mirrored", "central_storage", "one_device", "default",
              "tpu")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    # (named as it was started: the `tfcluster-worker` script, or `python -m worker`)
    prog = "tfcluster-worker" if os.path.basename(sys.argv[0]) == "tfcluster-worker" else "python -m worker"
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", choices=STRATEGIES,
                   default=os.environ.get(envnames.STRATEGY, "multi_worker_mirrored"),
                   help="default: $TFCLUSTER_STRATEGY, set by tfcluster")
    p.add_argument("--cpus", type=int, default=int(os.environ.get(envnames.CPUS) or 0),
                   help="split the CPU into this many logical devices (mirrored/central_storage replicas "
                        "without GPUs); default: $TFCLUSTER_CPUS, from the spec's devices: {cpus: N}")
    p.add_argument("--tpu", default=os.environ.get(envnames.TPU, "local"),
                   help="strategy tpu: 'local' (this TPU VM) or a Cloud TPU name; default: $TFCLUSTER_TPU")
    p.add_argument("--tpu-zone", default=os.environ.get(envnames.TPU_ZONE) or None)
    p.add_argument("--tpu-project", default=os.environ.get(envnames.TPU_PROJECT) or None)
    p.add_argument("--tpu-timeout", type=float, default=120.0,
                   help="strategy tpu: give up when the TPU has not answered within this many seconds")
    p.add_argument("--loop", choices=["fit", "custom"], default="fit",
                   help="Keras model.fit, or a custom training loop with strategy.run")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per replica; global = this x replicas")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="default: one pass over the training split")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--dataset", default="digits",
                   help="a TFDS image dataset (mnist, fashion_mnist, cifar10) or 'digits' (offline, default)")
    p.add_argument("--data-dir", default=None, help="TFDS data_dir (default: $TFDS_DATA_DIR or ~/tensorflow_datasets)")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading a missing dataset")
    p.add_argument("--shard-policy", choices=["auto", "data", "file", "off"], default="data")
    p.add_argument("--model-dir", default=None,
                   help="checkpoints, backups and the final model (default: $TFCLUSTER_STATE_DIR or ./tfcluster-state)")
    p.add_argument("--save-freq", default="epoch",
                   help="BackupAndRestore frequency: 'epoch' or a number of steps (a crash loses at most that many)")
    p.add_argument("--blocking-backups", action="store_true",
                   help="write each backup while training waits (tf_keras' own way); by default training goes on "
                        "once the variables are copied and a background thread writes the files (worker/background.py)")
    p.add_argument("--no-graceful-preemption", action="store_true",
                   help="synchronous strategies: do not all-reduce the replicas' SIGTERM flags each step (then "
                        "SIGTERM waits for the launcher's SIGKILL and up to --save-freq steps are redone)")
    p.add_argument("--progress-every", type=int, default=int(os.environ.get(envnames.PROGRESS_EVERY) or 10),
                   help="print a progress line every N steps (default: $TFCLUSTER_PROGRESS_EVERY or 10)")
    p.add_argument("--epoch-eval", action="store_true", default=os.environ.get(envnames.EPOCH_EVAL) == "1",
                   help="evaluate on the test split after every epoch (test_loss=, test_accuracy= on the epoch "
                        "line; `tfcluster compare` sets $TFCLUSTER_EPOCH_EVAL=1 for its accuracy curves)")
    p.add_argument("--step-delay", type=float, default=0.0,
                   help="sleep this many seconds per step (slows demos and fault-injection tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--partition-min-size-kb", type=int, default=0,
                   help="parameter_server: shard variables of at least this many KiB across the ps "
                        "(MinSizePartitioner, max_shards = number of ps); 0 = no partitioning")
    p.add_argument("--steps-per-execution", type=int, default=1,
                   help="parameter_server, --loop fit: steps per scheduled function (fewer round trips "
                        "from the coordinator); progress lines and --step-delay then come per execution")
    p.add_argument("--eval-timeout", type=float, default=600.0,
                   help="evaluator: give up after this many seconds without a new checkpoint")
    args = p.parse_args(argv)
    if args.save_freq != "epoch":
        try:
            args.save_freq = int(args.save_freq)
            if args.save_freq < 1:
                raise ValueError
        except ValueError:
            p.error(f"--save-freq must be 'epoch' or a whole number of steps >= 1, not {args.save_freq!r}")
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    if args.batch_size < 1:
        p.error("--batch-size must be >= 1")
    if args.progress_every < 1:
        p.error("--progress-every must be >= 1")
    if args.steps_per_execution < 1:
        p.error("--steps-per-execution must be >= 1")
    if args.cpus < 0:
        p.error("--cpus must be >= 0")
    if args.partition_min_size_kb < 0:
        p.error("--partition-min-size-kb must be >= 0")
    return args


def model_dir(args: argparse.Namespace) -> Path:
    return Path(args.model_dir or os.environ.get(envnames.STATE_DIR) or "tfcluster-state").resolve()


def import_tensorflow() -> None:
    """Import TensorFlow, tf_keras, TFDS and the worker's TensorFlow modules with the cyclic
    garbage collector paused, then freeze what they made (``gc.freeze``): about a million
    long-lived objects that every later full collection would walk again, and tracing, fit and
    the final save allocate enough to run many. A 20-step run took 6.2 s of CPU instead of 7.5 s
    (BENCHMARKS.md, "Launch overhead"). Frozen objects are never collected: they live as long as
    the process anyway."""
    import gc

    gc.disable()
    try:
        import tensorflow  # noqa: F401
        import tensorflow_datasets  # noqa: F401
        import tf_keras  # noqa: F401

        from worker import pss, sync  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def wait_as_standby() -> None:
    """Warm standby (TFCLUSTER_STANDBY=1, started by tfcluster ahead of a possible restart):
    do the slow part of starting -- importing TensorFlow -- now, then wait for SIGUSR1, which
    the launcher sends when a failure promotes this process to the next attempt, after writing
    that attempt's environment (TF_CONFIG may have changed: a replan) to the file named by
    TFCLUSTER_STANDBY_ENV. The three ``tfcluster-standby`` lines are the protocol: ``waiting``
    (SIGUSR1 is blocked: it may be promoted), ``ready`` (imports done), ``promoted`` (the new
    environment is in place); one that never says ``promoted`` is replaced by a cold start.
    The import runs at the lowest CPU and I/O priority, every thread back to the normal one once
    promoted (launcher/contract/standbyprio.py); it does not wait for the host to idle: the
    launcher starts a reference worker's standbys at the attempt's first step already."""
    from launcher.contract.standbyprio import wait_as_standby as wait_low

    # Blocked first thing, so a SIGUSR1 that comes early waits instead of killing us.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    report("tfcluster-standby waiting")  # (on the control channel, as every record: progress.report)
    wait_low(import_tensorflow, heavy=False, say=report)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    take_promotion_env()
    report("tfcluster-standby promoted")


def take_promotion_env() -> None:
    """The next attempt's environment from the promotion file (then removed); this process is
    no longer a standby, nor is anything it starts."""
    os.environ.pop(envnames.STANDBY, None)
    path = os.environ.pop(envnames.STANDBY_ENV, "")
    if not path:
        return
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            env = json.load(fh)
        os.unlink(path)
    except (OSError, ValueError) as exc:
        print(f"worker: warning: standby promotion file {path}: {exc}; keeping the environment it started with",
              file=sys.stderr, flush=True)
        return
    os.environ.update({str(k): str(v) for k, v in env.items()})


def main(argv: Optional[Sequence[str]] = None) -> int:
    outlive_reader()  # a preempted host's session ends before the save its SIGTERM asks for
    liveness.block()  # the stacks' signal, before any thread (TensorFlow's import) starts
    if os.environ.get(envnames.STANDBY) == "1":
        wait_as_standby()
    liveness.install()  # progress apart from output, and the stacks' signal (the hang watchdog)
    args = parse_args(argv)
    try:
        task = task_from_env()
    except ConfigError as exc:
        print(f"worker: error: {exc}", file=sys.stderr)
        return 2
    print(f"worker: {task.key} strategy={args.strategy} loop={args.loop} "
          f"restart={os.environ.get(envnames.RESTART_COUNT, '0')} model_dir={model_dir(args)}", flush=True)
    import_tensorflow()
    from worker.strategies import SettingError, collective_settings, configure_gpus

    try:
        print(f"worker: {task.key} gpus: {configure_gpus()}", flush=True)  # before any op initialises them
        collective_settings()
    except SettingError as exc:
        print(f"worker: error: {exc}", file=sys.stderr, flush=True)
        return 2
    # TensorFlow imported: the strategy's server binds its port next. Taken meanwhile (since the
    # launcher's check), one line naming the holder and exit 98 (launcher/contract/portcheck.py).
    check_task_port()
    if task.type == "evaluator":
        from worker.evaluator import run_evaluator

        return run_evaluator(args, task, model_dir(args))
    if args.strategy == "parameter_server":
        from worker.pss import run_pss

        return run_pss(args, task, model_dir(args))
    if task.type not in ("chief", "worker"):
        print(f"worker: error: task type {task.type!r} has no role under {args.strategy}", file=sys.stderr)
        return 2
    from worker.sync import run_sync
    from worker.tpu import TpuUnavailable

    try:
        code = run_sync(args, task, model_dir(args))
    except TpuUnavailable as exc:
        print(f"worker: error: {exc}", file=sys.stderr, flush=True)
        if exc.stuck:  # its thread is still inside TensorFlow: no interpreter teardown around it
            sys.stdout.flush()
            os._exit(2)
        return 2
    # The final save's collectives: no worker leaves while a peer may still pull its reply.
    exit_together(args.strategy, code)
    return code


# Exit 143 after the agreed save (preemption.py: 128 + SIGTERM).
SAVED_AND_STOPPED = 128 + signal.SIGTERM


def end(code: int) -> None:
    """The process's end with ``code``. After a preemption's agreed save (143), at once: the save
    is written (synchronously) and every line flushed, and the interpreter's teardown is not only
    useless there but slow. TensorFlow destroys the training data's iterator then, whose
    destructor waits for tf.data's autotuning thread to finish a sleep that grows with the
    iterator's age (gdb on a worker that lingered: ``~RootDataset::Iterator`` in
    ``~LogicalThreadWrapper``, the other thread in ``Model::OptimizeLoop``): the group's exit, and
    so its restart, waited 5-27 s for the slowest worker, up to the launcher's stop_grace and
    SIGKILL. Any other code exits as usual."""
    if code == SAVED_AND_STOPPED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main_entry() -> None:
    """The ``tfcluster-worker`` console script."""
    end(main())
