"""Making the ``tf.distribute`` strategy a task trains under, and the devices it uses.

Synchronous strategies (every replica runs every step; training in sync.py):

=======================  ==============================================================
default                  no distribution: ``tf.distribute.get_strategy()``, no scope
one_device               ``OneDeviceStrategy`` on ``/gpu:0`` if there is one, else ``/cpu:0``
mirrored                 ``MirroredStrategy`` over this host's GPUs, else its (logical) CPUs
central_storage          ``CentralStorageStrategy``: variables on ``/cpu:0``, compute as mirrored
multi_worker_mirrored    ``MultiWorkerMirroredStrategy`` over the TF_CONFIG cluster
tpu                      ``TPUStrategy`` (tpu.py)
=======================  ==============================================================

``parameter_server`` (asynchronous, a coordinator and servers) lives in pss.py.
``--cpus N`` ($TFCLUSTER_CPUS, from the spec's ``devices: {cpus: N}``) splits the CPU into N
logical devices first, so mirrored and central_storage run N replicas without GPUs (they
share the same cores: this measures distribution overhead, not speed-up).
"""

from __future__ import annotations

import argparse
import contextlib

import tensorflow as tf

SYNC_STRATEGIES = ("default", "one_device", "mirrored", "central_storage", "multi_worker_mirrored", "tpu")


def configure_cpus(n: int) -> None:
    """N logical CPU devices (before TensorFlow initialises its devices)."""
    if n and n > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])


def local_devices() -> list[str]:
    """This host's compute devices: every visible GPU, else every (logical) CPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def make(args: argparse.Namespace) -> tf.distribute.Strategy:
    configure_cpus(args.cpus)
    name = args.strategy
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if tf.config.list_logical_devices("GPU") else "/cpu:0")
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(local_devices())
    if name == "central_storage":
        return tf.distribute.experimental.CentralStorageStrategy(local_devices(), parameter_device="/cpu:0")
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        from .tpu import make_strategy

        return make_strategy(args.tpu, args.tpu_zone, args.tpu_project, args.tpu_timeout)
    raise ValueError(f"not a synchronous strategy: {name}")


def scope(strategy: tf.distribute.Strategy, name: str):
    """The strategy's scope; the default strategy trains with none (the baseline)."""
    return contextlib.nullcontext() if name == "default" else strategy.scope()


def describe(strategy: tf.distribute.Strategy) -> str:
    try:
        devices = ", ".join(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy has no device list
        devices = "the default device"
    return f"{type(strategy).__name__} on {devices}"
