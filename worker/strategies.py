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
GPUs (``configure_gpus``, before any strategy or op): a per-GPU memory limit from
$TFCLUSTER_GPU_MEMORY (MiB, the spec's ``devices: {gpu_memory: MiB}``) as a logical device
configuration; memory growth comes from TF_FORCE_GPU_ALLOW_GROWTH, which TensorFlow reads itself.
``multi_worker_mirrored`` gets ``CommunicationOptions`` from $TFCLUSTER_COLLECTIVE (auto, ring,
nccl) and $TFCLUSTER_COLLECTIVE_TIMEOUT (seconds), the spec's ``collective:``.
``--cpus N`` ($TFCLUSTER_CPUS, from the spec's ``devices: {cpus: N}``) splits the CPU into N
logical devices first, so mirrored and central_storage run N replicas without GPUs (they
share the same cores: this measures distribution overhead, not speed-up).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Optional

import tensorflow as tf

from launcher.contract import envnames

SYNC_STRATEGIES = ("default", "one_device", "mirrored", "central_storage", "multi_worker_mirrored", "tpu")


def configure_cpus(n: int) -> None:
    """N logical CPU devices (before TensorFlow initialises its devices)."""
    if n and n > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])


class SettingError(ValueError):
    """A GPU or collective variable the worker cannot use (exit 2: permanent)."""


def gpu_memory_limit() -> Optional[int]:
    """$TFCLUSTER_GPU_MEMORY as MiB, or None when unset."""
    value = os.environ.get(envnames.GPU_MEMORY, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise SettingError(f"{envnames.GPU_MEMORY}={value!r} is not a number of MiB; set devices.gpu_memory to one")
    return int(value)


def given_gpus(visible: Optional[str]) -> bool:
    """The launcher gave this task GPUs: CUDA_VISIBLE_DEVICES names at least one (not -1, not empty)."""
    if visible is None:
        return False
    first = visible.split(",")[0].strip()
    return bool(first) and not first.startswith("-")


def unseen_gpus_cause() -> str:
    """Why a TensorFlow given GPUs sees none, in words: a CPU-only build, else the CUDA/cuDNN it was
    built against (tf.sysconfig.get_build_info()) missing or mismatched on this machine."""
    if not tf.test.is_built_with_cuda():
        return (f"this TensorFlow ({tf.__version__}) is a CPU-only build; install one with CUDA "
                "(pip install 'tensorflow[and-cuda]')")
    info = tf.sysconfig.get_build_info()
    return (f"TensorFlow {tf.__version__} was built for CUDA {info.get('cuda_version', '?')} / cuDNN "
            f"{info.get('cudnn_version', '?')} and could not use them here: a CUDA/cuDNN mismatch, missing CUDA "
            "libraries or a driver too old (TensorFlow's log above names the library it could not load)")


def configure_gpus() -> str:
    """Apply the memory limit to every visible GPU (before TensorFlow initialises them); what
    was set, in words, for the worker's first line. A task given GPUs (CUDA_VISIBLE_DEVICES)
    whose TensorFlow sees none is a SettingError naming the likely cause, unless
    $TFCLUSTER_CPU_FALLBACK (``devices.cpu_fallback: true``) says CPU is fine."""
    limit = gpu_memory_limit()
    gpus = tf.config.list_physical_devices("GPU")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not gpus and given_gpus(visible):
        if os.environ.get(envnames.CPU_FALLBACK) != "1":
            raise SettingError(f"given GPUs (CUDA_VISIBLE_DEVICES={visible[:80]}) but TensorFlow sees none: "
                               f"{unseen_gpus_cause()}; or set devices.cpu_fallback: true to train on CPU")
        cpu = "; TensorFlow sees no GPU: training on CPU (devices.cpu_fallback)"
    else:
        cpu = ""
    if limit and gpus:
        for gpu in gpus:
            tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
    growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true"
    memory = f"limit {limit} MiB" if limit else "growth" if growth else "default"
    return f"{len(gpus)} visible (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}), memory {memory}" + cpu


_IMPLEMENTATIONS = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}


def collective_settings() -> tuple[str, Optional[float]]:
    """($TFCLUSTER_COLLECTIVE, $TFCLUSTER_COLLECTIVE_TIMEOUT): the implementation and seconds."""
    impl = (os.environ.get(envnames.COLLECTIVE) or "auto").strip().lower()
    if impl not in _IMPLEMENTATIONS:
        raise SettingError(f"{envnames.COLLECTIVE}={impl!r}; use auto, ring or nccl (collective.implementation)")
    raw = (os.environ.get(envnames.COLLECTIVE_TIMEOUT) or "").strip()
    try:
        timeout = float(raw) if raw else None
    except ValueError:
        timeout = -1.0
    if timeout is not None and timeout <= 0:
        raise SettingError(f"{envnames.COLLECTIVE_TIMEOUT}={raw!r} is not a number of seconds > 0 (collective.timeout)")
    return impl, timeout


def communication_options() -> "tf.distribute.experimental.CommunicationOptions":
    """MultiWorkerMirroredStrategy's CommunicationOptions from the collective settings."""
    impl, timeout = collective_settings()
    implementation = getattr(tf.distribute.experimental.CommunicationImplementation, _IMPLEMENTATIONS[impl])
    return tf.distribute.experimental.CommunicationOptions(implementation=implementation, timeout_seconds=timeout)


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
        impl, timeout = collective_settings()
        print(f"worker: collective implementation={impl} timeout={'none' if timeout is None else f'{timeout:g}s'}",
              flush=True)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options())
    if name == "tpu":
        from worker.tpu import make_strategy

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
