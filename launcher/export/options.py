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
Like the backends' blocks, these are OptionsModels (launcher/spec/model/); the loader,
launcher/loader/load.py, adds them to the Spec class.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Union

from pydantic import Field, field_validator

from launcher.spec.model import OptionsModel, PosInt, UInt

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
    if not QUANTITY_RE.fullmatch(text):
        raise ValueError(f"'{text}' is not a Kubernetes quantity; use e.g. {example}")
    return text


class PodResources(OptionsModel):
    """Requests = limits for one pod: ``cpu`` (2, 500m), ``memory`` (8Gi), ``gpus`` (nvidia.com/gpu)."""

    cpu: Optional[Union[str, int, float]] = Field(None, json_schema_extra={"pattern": QUANTITY_RE.pattern})
    """CPU request = limit, a Kubernetes quantity (2, 500m)."""
    memory: Optional[Union[str, int, float]] = Field(None, json_schema_extra={"pattern": QUANTITY_RE.pattern})
    """Memory request = limit, a Kubernetes quantity (8Gi)."""
    gpus: Optional[UInt] = None
    """GPUs per pod: the nvidia.com/gpu limit (default: from the spec's devices and the group's gpus)."""

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, v: Any) -> Optional[str]:
        return _quantity(v, "2 or 500m")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Optional[str]:
        return _quantity(v, "8Gi")


class ResourcesByType(_ByType):
    """Pod resources keyed by task type, plus ``default`` for every type not listed."""

    default: Optional[PodResources] = None
    """For every type; a type's own keys override these."""
    chief: Optional[PodResources] = None
    """The chief's pod."""
    worker: Optional[PodResources] = None
    """Each worker's pod."""
    ps: Optional[PodResources] = None
    """Each parameter server's pod."""
    evaluator: Optional[PodResources] = None
    """The evaluator's pod."""


class KubernetesOptions(OptionsModel):
    """``kubernetes:`` -- what ``tfcluster export --to tfjob|jobset`` puts in the TFJob or JobSet beyond the spec."""

    namespace: str = Field("default", json_schema_extra={"pattern": DNS1123_LABEL_RE.pattern, "maxLength": 63})
    """The job's namespace (a DNS-1123 label); its Secret (secret env values) goes there too."""
    resources: ResourcesByType = ResourcesByType()
    """Per pod: requests = limits, by task type plus `default`."""
    ttl_seconds_after_finished: Optional[UInt] = None
    """Delete the finished TFJob or JobSet (and its pods) after this long (ttlSecondsAfterFinished)."""
    active_deadline_seconds: Optional[PosInt] = None
    """Fail the job when it runs longer than this (TFJob: runPolicy; JobSet: each attempt's Jobs)."""
    service_account: Optional[str] = Field(None, json_schema_extra={"pattern": DNS1123_LABEL_RE.pattern, "maxLength": 63})
    """The pods' serviceAccountName."""
    queue: Optional[str] = Field(None, json_schema_extra={"pattern": DNS1123_LABEL_RE.pattern, "maxLength": 63})
    """Kueue's LocalQueue for the job: the label kueue.x-k8s.io/queue-name (Kueue then admits it)."""

    @field_validator("namespace", "service_account", "queue")
    @classmethod
    def _dns_label(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and (len(v) > 63 or not DNS1123_LABEL_RE.fullmatch(v)):
            raise ValueError(f"'{v}' is not a DNS-1123 label; use lowercase letters, digits and '-' (at most 63)")
        return v


class Machine(OptionsModel):
    """One Vertex worker pool's machine: machineSpec and diskSpec of its WorkerPoolSpec."""

    machine_type: Optional[str] = None
    """machineSpec.machineType, e.g. n1-standard-8 (default n1-standard-4)."""
    accelerator_type: Optional[str] = None
    """machineSpec.acceleratorType, e.g. NVIDIA_TESLA_T4 (the API's AcceleratorType enum)."""
    accelerator_count: Optional[UInt] = None
    """machineSpec.acceleratorCount (default: from the spec's devices and the group's gpus)."""
    boot_disk_type: Optional[str] = None
    """diskSpec.bootDiskType: pd-ssd (Vertex's default) or pd-standard."""
    boot_disk_size_gb: Optional[PosInt] = None
    """diskSpec.bootDiskSizeGb."""


class MachinesByType(_ByType):
    """Worker pool machines keyed by task type, plus ``default`` for every type not listed."""

    default: Optional[Machine] = None
    """For every pool; a type's own keys override these."""
    chief: Optional[Machine] = None
    """The chief's pool."""
    worker: Optional[Machine] = None
    """The workers' pool."""
    ps: Optional[Machine] = None
    """The parameter servers' pool."""
    evaluator: Optional[Machine] = None
    """The evaluator's pool."""


class VertexOptions(OptionsModel):
    """``vertex:`` -- what ``tfcluster export --to vertex`` puts in the CustomJob beyond the spec."""

    machines: MachinesByType = MachinesByType()
    """machineSpec/diskSpec per worker pool, by task type plus `default`."""
    base_output_directory: Optional[str] = Field(None, json_schema_extra={"pattern": "^gs://"})
    """CustomJobSpec.baseOutputDirectory.outputUriPrefix (Vertex then sets AIP_MODEL_DIR etc.)."""
    service_account: Optional[str] = None
    """The service account the CustomJob runs as."""
    timeout: Optional[PosInt] = None
    """scheduling.timeout in seconds (Vertex's default: 7 days)."""

    @field_validator("base_output_directory")
    @classmethod
    def _gcs(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.startswith("gs://"):
            raise ValueError(f"'{v}' is not a gs:// URL; Vertex writes its outputs to Cloud Storage")
        return v
