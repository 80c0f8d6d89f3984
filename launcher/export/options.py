"""The ``kubernetes:`` and ``vertex:`` blocks of cluster.yaml, read only by ``tfcluster export``.

Both are keyed by task type like ``tasks:``, plus ``default`` for every type not listed::

    kubernetes:
      namespace: training
      resources:
        default: {cpu: 2, memory: 4Gi}
        worker: {cpu: 4, memory: 8Gi, gpus: 1}
    vertex:
      machines:
        default: {machine_type: n1-standard-4}
        worker: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 1}

A type's own entry overrides the ``default`` entry key by key (see ``merged``).
Like the backends' blocks, these are OptionsModels (launcher/spec/model.py); the loader, spec.py,
adds them to the Spec class.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Union

from pydantic import Field, field_validator

from launcher.spec.model import OptionsModel

# Kubernetes resource.Quantity, as the TFJob CRD's own pattern spells it.
QUANTITY_RE = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class _ByType(OptionsModel):
    def merged(self, task_type: str) -> dict[str, Any]:
        """The ``default`` entry overlaid with the type's own keys (only those it sets)."""
        out: dict[str, Any] = {}
        for name in ("default", task_type):
            entry = getattr(self, name)
            if entry is not None:
                out.update({k: getattr(entry, k) for k in entry.model_fields_set})
        return out

    def own(self, task_type: str) -> dict[str, Any]:
        """Only the keys the type's own entry sets (not ``default``'s)."""
        entry = getattr(self, task_type)
        return {} if entry is None else {k: getattr(entry, k) for k in entry.model_fields_set}


def _quantity(v: Any, example: str) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ValueError(f"{v!r} is not a Kubernetes quantity; use e.g. {example}")
    text = f"{v:g}" if isinstance(v, float) else str(v)
    if not QUANTITY_RE.match(text):
        raise ValueError(f"'{text}' is not a Kubernetes quantity; use e.g. {example}")
    return text


class PodResources(OptionsModel):
    """Requests = limits for one pod: ``cpu`` (2, 500m), ``memory`` (8Gi), ``gpus`` (nvidia.com/gpu)."""

    cpu: Optional[Union[str, int, float]] = None
    memory: Optional[Union[str, int]] = None
    gpus: Optional[int] = Field(default=None, ge=0, strict=True)

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, v: Any) -> Optional[str]:
        return _quantity(v, "2 or 500m")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Optional[str]:
        return _quantity(v, "8Gi")


class ResourcesByType(_ByType):
    default: Optional[PodResources] = None
    chief: Optional[PodResources] = None
    worker: Optional[PodResources] = None
    ps: Optional[PodResources] = None
    evaluator: Optional[PodResources] = None


class KubernetesOptions(OptionsModel):
    """``kubernetes:`` -- what ``tfcluster export --to tfjob`` puts in the TFJob beyond the spec."""

    namespace: str = "default"
    resources: ResourcesByType = ResourcesByType()
    # runPolicy.ttlSecondsAfterFinished: delete the finished TFJob (and its pods) after this long.
    ttl_seconds_after_finished: Optional[int] = Field(default=None, ge=0, strict=True)
    # runPolicy.activeDeadlineSeconds: fail the job when it runs longer than this.
    active_deadline_seconds: Optional[int] = Field(default=None, ge=1, strict=True)
    service_account: Optional[str] = None

    @field_validator("namespace", "service_account")
    @classmethod
    def _dns_label(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (len(v) > 63 or not DNS1123_LABEL_RE.match(v)):
            raise ValueError(f"'{v}' is not a DNS-1123 label; use lowercase letters, digits and '-' (at most 63)")
        return v


class Machine(OptionsModel):
    """One Vertex worker pool's machine: machineSpec and diskSpec of its WorkerPoolSpec."""

    machine_type: Optional[str] = None
    accelerator_type: Optional[str] = None  # e.g. NVIDIA_TESLA_T4 (the API's AcceleratorType enum)
    accelerator_count: Optional[int] = Field(default=None, ge=0, strict=True)
    boot_disk_type: Optional[str] = None  # pd-ssd (Vertex's default) or pd-standard
    boot_disk_size_gb: Optional[int] = Field(default=None, ge=1, strict=True)


class MachinesByType(_ByType):
    default: Optional[Machine] = None
    chief: Optional[Machine] = None
    worker: Optional[Machine] = None
    ps: Optional[Machine] = None
    evaluator: Optional[Machine] = None


class VertexOptions(OptionsModel):
    """``vertex:`` -- what ``tfcluster export --to vertex`` puts in the CustomJob beyond the spec."""

    machines: MachinesByType = MachinesByType()
    # CustomJobSpec.baseOutputDirectory.outputUriPrefix (Vertex then sets AIP_MODEL_DIR etc.).
    base_output_directory: Optional[str] = None
    service_account: Optional[str] = None
    # scheduling.timeout in seconds (Vertex's default: 7 days).
    timeout: Optional[int] = Field(default=None, ge=1, strict=True)

    @field_validator("base_output_directory")
    @classmethod
    def _gcs(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.startswith("gs://"):
            raise ValueError(f"'{v}' is not a gs:// URL; Vertex writes its outputs to Cloud Storage")
        return v
