"""``devices:``, ``collective:`` and ``tpu:``: what each task computes on and how replicas all-reduce."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, WithJsonSchema, field_validator

from launcher.spec.model.base import POSINT, UINT, Flag, OptionsModel, PosInt, Seconds, whole_number


class Devices(OptionsModel):
    """``devices:`` -- what each task uses: ``gpus: all | N | [0, 2]`` (which of a host's GPUs the
    run may use), ``gpus_per_task: auto | N | all`` and ``gpu_memory: auto | growth | all | MiB``
    (each GPU task's share and its memory setting: launcher/plan/gpus.py), ``cpu_fallback`` (a task
    given GPUs its TensorFlow cannot see trains on CPU instead of failing), ``cpus: N`` (N logical CPU
    devices, so mirrored/central_storage run N replicas without GPUs); ``threads: auto | N | 0``
    (each task's TF/OpenMP thread budget: launcher/plan/threads.py)."""

    gpus: Annotated[Any, WithJsonSchema({"anyOf": [
        {"const": "all"}, UINT, {"type": "array", "items": UINT, "uniqueItems": True}]})] = "all"
    """Which of a host's GPUs the run may use: all, N (GPUs 0..N-1; 0: none) or a list of indices ([0, 2])."""
    gpus_per_task: Annotated[Any, WithJsonSchema({"anyOf": [{"enum": ["auto", "all"]}, POSINT]})] = "auto"
    """Each GPU task's GPUs: auto (a host's GPUs shared out with the same count for every worker, as TensorFlow
    requires; leftovers to the evaluator, else idle), N (each its own N), or all (every GPU task sees every GPU of
    its host)."""
    gpu_memory: Annotated[Any, WithJsonSchema({"anyOf": [{"enum": ["auto", "growth", "all"]}, POSINT]})] = "auto"
    """Each GPU task's memory setting: auto (growth when tasks share a GPU), growth, all (TensorFlow's
    default: nearly all of it), or a limit per GPU in MiB."""
    cpu_fallback: Flag = False
    """A task given GPUs whose TensorFlow sees none: false (default) fails at once in one line naming the likely
    cause (a CPU-only TensorFlow, a CUDA/cuDNN mismatch); true trains on CPU instead, said in its log (the
    reference worker; TFCLUSTER_CPU_FALLBACK)."""
    cpus: Optional[PosInt] = None
    """N logical CPU devices, so mirrored/central_storage run N replicas without GPUs (single-host
    strategies only)."""
    threads: Annotated[Any, WithJsonSchema({"anyOf": [{"const": "auto"}, UINT]})] = "auto"
    """Each task's TF/OpenMP thread budget: auto (its share of its host's cores; the inter-op pool never
    below 2), N threads per task, or 0 (TensorFlow's own defaults)."""

    @field_validator("threads", mode="before")
    @classmethod
    def _threads(cls, v: Any) -> Any:
        v = whole_number(v)
        if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (each task its share of its host's cores), "
                         "a number of threads per task (2), or 0 (leave TensorFlow's defaults)")

    @field_validator("gpus_per_task", mode="before")
    @classmethod
    def _gpus_per_task(cls, v: Any) -> Any:
        v = whole_number(v)
        if v in ("auto", "all") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (the host's GPUs divided among its GPU tasks), a number "
                         "of GPUs per task (1), or all (every task sees every GPU of its host)")

    @field_validator("gpu_memory", mode="before")
    @classmethod
    def _gpu_memory(cls, v: Any) -> Any:
        v = whole_number(v)
        if v in ("auto", "growth", "all") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError(f"{v!r} is not valid; use auto (growth when tasks share a GPU), growth, all "
                         "(TensorFlow's default: nearly all of it), or a limit per GPU in MiB (8000)")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        v = [whole_number(i) for i in v] if isinstance(v, (list, tuple)) else whole_number(v)
        if v == "all":
            return v
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        if isinstance(v, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
            if len(set(v)) != len(v):
                raise ValueError(f"{list(v)} lists a GPU twice; list each GPU index once")
            return tuple(v)
        raise ValueError(f"{v!r} is not valid; use all, a number of GPUs (2), or a list of GPU indices ([0, 2])")

    @property
    def cuda_visible_devices(self) -> Optional[str]:
        """The CUDA_VISIBLE_DEVICES value, or None to leave every GPU visible."""
        if self.gpus == "all":
            return None
        ids = range(self.gpus) if isinstance(self.gpus, int) else self.gpus
        return ",".join(str(i) for i in ids) or "-1"  # -1: no GPU at all


class Collective(OptionsModel):
    """``collective:`` -- MultiWorkerMirroredStrategy's all-reduce: ``implementation`` (auto: the
    plan picks NCCL where every worker owns its GPUs, else RING (`tfcluster plan` says which and why)
    collective_choice) and ``timeout`` (seconds: TensorFlow's ``timeout_seconds``, documented by it
    as for debugging hangs: it starts a thread per collective). The reference worker builds
    ``tf.distribute.experimental.CommunicationOptions`` from them (TFCLUSTER_COLLECTIVE*)."""

    implementation: Literal["auto", "ring", "nccl"] = "auto"
    """The all-reduce: auto (nccl where every worker owns its GPUs, else ring; plan says which and why), ring, or
    nccl (GPUs; refused where tasks share a GPU: NCCL refuses two ranks on one GPU)."""
    timeout: Optional[Seconds] = Field(default=None, gt=0)
    """Seconds after which a hung collective becomes an error the launcher can retry (none: no limit). For
    debugging, as TensorFlow documents timeout_seconds: it runs a thread per collective."""


class Tpu(OptionsModel):
    """``tpu:`` -- which TPU ``strategy: tpu`` connects to (TPUClusterResolver's arguments)."""

    name: str = "local"
    """local: a TPU VM's own TPU; else the Cloud TPU's name."""
    zone: Optional[str] = None
    """The Cloud TPU's zone."""
    project: Optional[str] = None
    """The Cloud TPU's project."""
