"""What the Kubernetes exports (``--to tfjob``, ``--to jobset``) share: a pod's resources and
GPUs, env values Kubernetes must not expand, and secret env values kept out of the job's file.

Secrets by reference: an env variable that ``launcher.plan.model.is_secret`` calls secret (the
predicate ``tfcluster plan`` redacts with; ``secret_env`` is its one caller here) is not written
into the job: its value goes into a ``Secret`` manifest (v1, type Opaque, ``stringData``) that the
export writes to a file of its own, mode 0600 (``secret_path``), and every container reads it with
``valueFrom.secretKeyRef`` (``env_entries``). Apply the Secret before the job.

Pure: nothing here touches the disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from launcher.export.common import comment_lines, comment_text, dump_yaml, type_gpus
from launcher.plan.model import is_secret
from launcher.spec.model import Spec

GPU_RESOURCE = "nvidia.com/gpu"
SECRET_SUFFIX = ".secret.yaml"
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "tfcluster")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def no_expand(value: str) -> str:
    """Kubernetes expands ``$(VAR)`` in command, args and env values; ``$$(`` is a literal ``$(``."""
    return value.replace("$(", "$$(")


def labels(spec: Spec) -> dict[str, str]:
    """The job's labels: tfcluster's, and Kueue's queue when ``kubernetes.queue`` names one."""
    out = dict([MANAGED_BY_LABEL])
    if spec.kubernetes.queue:
        out[QUEUE_LABEL] = spec.kubernetes.queue
    return out


def gpu_limit(spec: Spec, task_type: str) -> Optional[int]:
    """``nvidia.com/gpu`` of a replica type: its own ``kubernetes.resources.<type>.gpus``, else
    what the spec gives each of its tasks (common.type_gpus: gpus_per_task N, 0 for the ps and
    the parameter_server chief), else ``kubernetes.resources.default.gpus``."""
    own = spec.kubernetes.resources.own(task_type).get("gpus")
    if own is not None:
        return own
    derived = type_gpus(spec, task_type)
    if derived is not None:
        return derived
    return spec.kubernetes.resources.merged(task_type).get("gpus")


def resources(spec: Spec, task_type: str) -> Optional[dict[str, Any]]:
    """A container's ``resources``: cpu and memory requests = limits, GPUs in limits only."""
    r = spec.kubernetes.resources.merged(task_type)
    amounts = {k: v for k, v in (("cpu", r.get("cpu")), ("memory", r.get("memory"))) if v is not None}
    limits = dict(amounts)
    gpus = gpu_limit(spec, task_type)
    if gpus:
        limits[GPU_RESOURCE] = gpus  # GPUs go in limits (requests default to them)
    if not limits:
        return None
    out: dict[str, Any] = {"limits": limits}
    if amounts:
        out["requests"] = amounts
    return out


# ---------------------------------------------------------------- secrets


def secret_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` whose values stay out of the job's file: the one place the
    export asks ``is_secret`` (so what it learns to recognise, the exports follow)."""
    return {k: v for k, v in env.items() if is_secret(k, v)}


def secret_name(spec: Spec) -> str:
    """The Secret's name: the job's, plus ``-env`` (a DNS-1123 subdomain, as the job's name is a label)."""
    return f"{spec.name}-env"


def env_entries(env: Mapping[str, str], secrets: Mapping[str, str], secret: str) -> list[dict[str, Any]]:
    """A container's ``env``: each value verbatim (``$(`` escaped), a secret one by reference."""
    out: list[dict[str, Any]] = []
    for name, value in env.items():
        if name in secrets:
            out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}})
        else:
            out.append({"name": name, "value": no_expand(value)})
    return out


def secret_dict(spec: Spec, secrets: Mapping[str, str]) -> dict[str, Any]:
    """The Secret holding ``secrets`` (stringData: Kubernetes neither expands nor needs base64 there)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(spec), "namespace": spec.kubernetes.namespace,
                     "labels": dict([MANAGED_BY_LABEL])},
        "type": "Opaque",
        "stringData": dict(secrets),
    }


def secret_path(job_path: Path) -> Path:
    """The Secret's file beside the job's: ``demo.jobset.yaml`` -> ``demo.jobset.secret.yaml``."""
    name = job_path.name[:-5] if job_path.name.endswith(".yaml") else job_path.name
    return job_path.with_name(name + SECRET_SUFFIX)


def render_secret(header: str, source: str, doc: dict[str, Any], job_file: str, secret_file: str) -> str:
    keys = ", ".join(doc["stringData"])
    first = f"{header} from {comment_text(source)}; edit the spec and regenerate rather than this file."
    text = f"""\
The secret values of the spec's env ({keys}) for {job_file}, which reads them by reference
(valueFrom.secretKeyRef) and never holds them. Written with mode 0600: keep it out of version control.
Apply it first: kubectl apply -f {secret_file} && kubectl apply -f {job_file}"""
    return "\n".join([first, *comment_lines(text)]) + "\n" + dump_yaml(doc)
