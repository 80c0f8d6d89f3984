"""Offline validation of exported jobs: each returns a list of one-line problems (empty = valid).

TFJob: the vendored CRD's OpenAPI schema (launcher/schemas/kubeflow.org_tfjobs.yaml, training-operator
v1.9.0) with ``jsonschema``, plus what the schema leaves to the operator's webhook and controller
(see launcher/schemas/README.md): enums, the ``tensorflow`` container and ``tfjob-port`` port, at most
one Chief, a DNS-1035 job name, and unknown fields (which the API server would silently drop).

Vertex: the API's own message types (``google.cloud.aiplatform_v1``, optional: the ``[export]``
extra) parse the JSON strictly, plus tfcluster's checks of what the types cannot express (pool
order and the primary pool's single replica, required fields, camelCase keys for gcloud).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Optional

import yaml

CRD_FILE = "kubeflow.org_tfjobs.yaml"
TFJOB_API_VERSION = "kubeflow.org/v1"
REPLICA_TYPES = ("Chief", "Master", "Worker", "PS", "Evaluator")
CHIEF_TYPES = ("Chief", "Master")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")
SUCCESS_POLICIES = ("", "AllWorkers")
CONTAINER_NAME = "tensorflow"
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
METADATA_KEYS = ("name", "namespace", "labels", "annotations")
# Set by the operator / by Vertex for every replica: an exported job must leave them alone.
ENGINE_ENV = ("TF_CONFIG", "CLUSTER_SPEC")
DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Vertex labels: lowercase letters, digits, '_' and '-', at most 64 (keys start with a letter).
VERTEX_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
VERTEX_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,64}$")
VERTEX_POOLS = ("chief", "worker", "ps", "evaluator")  # workerPoolSpecs[0..3]


# ---------------------------------------------------------------- TFJob


@lru_cache(maxsize=1)
def tfjob_schema() -> dict[str, Any]:
    """``spec.versions[0].schema.openAPIV3Schema`` of the vendored CRD."""
    text = resources.files("launcher").joinpath("schemas", CRD_FILE).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _schema_problems(doc: Any) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft4Validator(tfjob_schema())
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        problems.append(f"{_path(err.absolute_path)}: {err.message} (TFJob CRD schema)")
    return problems


def _unknown_fields(node: Any, schema: dict[str, Any], parts: tuple) -> list[str]:
    """Keys the structural schema does not declare (the API server would prune them)."""
    problems: list[str] = []
    if isinstance(node, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or (props is None and extra is None):
            return problems  # free-form (metadata is checked on its own)
        for key, value in node.items():
            if props is not None and key in props:
                problems += _unknown_fields(value, props[key], parts + (key,))
            elif isinstance(extra, dict):
                problems += _unknown_fields(value, extra, parts + (key,))
            else:
                problems.append(f"{_path(parts + (key,))}: unknown field (not in the TFJob CRD schema)")
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(node):
            problems += _unknown_fields(item, schema["items"], parts + (i,))
    return problems


def _metadata_problems(meta: Any) -> list[str]:
    if not isinstance(meta, dict):
        return ["metadata: required mapping with name"]
    problems = [f"metadata.{k}: unknown field (use name, namespace, labels, annotations)" for k in meta
                if k not in METADATA_KEYS]
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 63 or not DNS1035_RE.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label (lowercase letters, digits, '-', "
                        "starting with a letter, at most 63) (TFJob webhook)")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not DNS1123_LABEL_RE.fullmatch(namespace)):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    for key in ("labels", "annotations"):
        value = meta.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            problems.append(f"metadata.{key}: must map strings to strings")
    return problems


def validate_tfjob(doc: Any) -> list[str]:
    """Every problem of a TFJob manifest, one line each."""
    if not isinstance(doc, dict):
        return ["(top level): a TFJob is a mapping"]
    problems = _schema_problems(doc)
    problems += _unknown_fields({k: v for k, v in doc.items() if k != "metadata"}, tfjob_schema(), ())
    if doc.get("apiVersion") != TFJOB_API_VERSION or doc.get("kind") != "TFJob":
        problems.append(f"apiVersion/kind: {doc.get('apiVersion')!r}/{doc.get('kind')!r}; "
                        f"must be {TFJOB_API_VERSION}/TFJob")
    problems += _metadata_problems(doc.get("metadata"))
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    run_policy = spec.get("runPolicy") if isinstance(spec.get("runPolicy"), dict) else {}
    clean = run_policy.get("cleanPodPolicy")
    if clean is not None and clean not in CLEAN_POD_POLICIES:
        problems.append(f"spec.runPolicy.cleanPodPolicy: {clean!r} is not one of {', '.join(CLEAN_POD_POLICIES)}")
    success = spec.get("successPolicy")
    if success is not None and success not in SUCCESS_POLICIES:
        problems.append(f"spec.successPolicy: {success!r} is not one of '', AllWorkers")
    replicas = spec.get("tfReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        problems.append("spec.tfReplicaSpecs: required; give at least one replica type")
        return problems
    chiefs = [t for t in replicas if t in CHIEF_TYPES]
    if len(chiefs) > 1:
        problems.append(f"spec.tfReplicaSpecs: {' and '.join(chiefs)}: at most one Chief or Master (TFJob webhook)")
    for rtype, rspec in replicas.items():
        where = f"spec.tfReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            problems.append(f"{where}: unknown replica type; use one of {', '.join(REPLICA_TYPES)}")
        if not isinstance(rspec, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        policy = rspec.get("restartPolicy")
        if policy is not None and policy not in RESTART_POLICIES:
            problems.append(f"{where}.restartPolicy: {policy!r} is not one of {', '.join(RESTART_POLICIES)}")
        if rtype in CHIEF_TYPES and isinstance(rspec.get("replicas"), int) and rspec["replicas"] > 1:
            problems.append(f"{where}.replicas: {rspec['replicas']}; a TFJob has at most one chief")
        problems += _container_problems(where, rspec)
    return problems


def _container_problems(where: str, rspec: dict) -> list[str]:
    pod = ((rspec.get("template") or {}).get("spec") or {}) if isinstance(rspec.get("template"), dict) else {}
    containers = pod.get("containers") if isinstance(pod, dict) else None
    path = f"{where}.template.spec.containers"
    if not isinstance(containers, list) or not containers:
        return [f"{path}: required; give the {CONTAINER_NAME} container (TFJob webhook)"]
    problems = []
    named = [c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER_NAME]
    if not named:
        problems.append(f"{path}: no container named '{CONTAINER_NAME}' (TFJob webhook: the operator "
                        "injects TF_CONFIG into it and reads its exit code)")
    for i, c in enumerate(containers):
        if isinstance(c, dict) and not c.get("image"):
            problems.append(f"{path}[{i}].image: required (TFJob webhook)")
        for j, env in enumerate((c.get("env") or []) if isinstance(c, dict) else []):
            if isinstance(env, dict) and env.get("name") in ENGINE_ENV:
                problems.append(f"{path}[{i}].env[{j}]: {env['name']} is set by the operator; remove it")
    for c in named:
        ports = [p for p in (c.get("ports") or []) if isinstance(p, dict) and p.get("name") == PORT_NAME]
        if len(ports) != 1:
            problems.append(f"{path}: the {CONTAINER_NAME} container needs exactly one port named '{PORT_NAME}' "
                            f"(found {len(ports)}); the operator builds TF_CONFIG from it")
    return problems


# ---------------------------------------------------------------- Vertex AI


def aiplatform_types() -> Optional[Any]:
    """``google.cloud.aiplatform_v1`` if installed (the ``[export]`` extra), else None."""
    try:
        from google.cloud import aiplatform_v1
    except ImportError:
        return None
    return aiplatform_v1


def _api_problem(kind: str, parse, text: str) -> list[str]:
    try:
        parse(text, ignore_unknown_fields=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises ParseError/TypeError/ValueError
        message = " ".join(str(exc).split()) or type(exc).__name__
        return [f"{kind}: {message} (google.cloud.aiplatform_v1.{kind})"]
    return []


def _camel_problems(node: Any, parts: tuple) -> list[str]:
    problems = []
    if isinstance(node, dict):
        for key, value in node.items():
            if "_" in str(key):
                problems.append(f"{_path(parts + (key,))}: snake_case key; gcloud --config takes camelCase only")
            problems += _camel_problems(value, parts + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            problems += _camel_problems(item, parts + (i,))
    return problems


def _job_spec_problems(spec: Any, prefix: str) -> list[str]:
    if not isinstance(spec, dict):
        return [f"{prefix or '(top level)'}: must be a mapping (CustomJobSpec)"]
    at = (prefix + ".") if prefix else ""
    pools = spec.get("workerPoolSpecs")
    if not isinstance(pools, list) or not pools:
        return [f"{at}workerPoolSpecs: required; pool 0 is the primary replica"]
    problems = []
    if len(pools) > len(VERTEX_POOLS):
        problems.append(f"{at}workerPoolSpecs: {len(pools)} pools; Vertex has 4 (chief, workers, ps, evaluators)")
    for i, pool in enumerate(pools):
        where = f"{at}workerPoolSpecs[{i}]"
        if not isinstance(pool, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        if not pool:
            if i == 0:
                problems.append(f"{where}: the primary replica's pool cannot be empty")
            continue
        count = pool.get("replicaCount")
        if i == 0 and str(count) != "1":
            problems.append(f"{where}.replicaCount: {count!r}; pool 0 (the primary replica, chief) must have "
                            "exactly 1 replica")
        elif i > 0 and (not str(count).isdigit() or int(str(count)) < 1):
            problems.append(f"{where}.replicaCount: {count!r}; a used pool needs 1 or more replicas "
                            "(an unused pool is {})")
        machine = pool.get("machineSpec") if isinstance(pool.get("machineSpec"), dict) else {}
        if not machine.get("machineType"):
            problems.append(f"{where}.machineSpec.machineType: required")
        container = pool.get("containerSpec") if isinstance(pool.get("containerSpec"), dict) else {}
        if not container.get("imageUri"):
            problems.append(f"{where}.containerSpec.imageUri: required")
        for j, env in enumerate(container.get("env") or []):
            if isinstance(env, dict) and env.get("name") in ENGINE_ENV:
                problems.append(f"{where}.containerSpec.env[{j}]: {env['name']} is set by Vertex; remove it")
    return problems


def validate_vertex_spec(spec: Any, types: Any = "auto") -> list[str]:
    """A CustomJobSpec as written for ``gcloud ai custom-jobs create --config``."""
    types = aiplatform_types() if types == "auto" else types
    problems = _job_spec_problems(spec, "") + _camel_problems(spec, ())
    if types is not None:
        problems += _api_problem("CustomJobSpec", types.CustomJobSpec.from_json, json.dumps(spec))
    return problems


def validate_custom_job(job: Any, types: Any = "auto") -> list[str]:
    """A CustomJob as sent to the REST API (projects.locations.customJobs.create)."""
    types = aiplatform_types() if types == "auto" else types
    if not isinstance(job, dict):
        return ["(top level): a CustomJob is a mapping"]
    problems = []
    name = job.get("displayName")
    if not isinstance(name, str) or not name or len(name) > 128:
        problems.append("displayName: required, 1 to 128 characters")
    labels = job.get("labels") or {}
    for key, value in labels.items() if isinstance(labels, dict) else ():
        if not VERTEX_LABEL_KEY_RE.fullmatch(str(key)) or not VERTEX_LABEL_VALUE_RE.fullmatch(str(value)):
            problems.append(f"labels.{key}: keys and values take lowercase letters, digits, '_' and '-' "
                            "(at most 64)")
    problems += _job_spec_problems(job.get("jobSpec"), "jobSpec")
    if types is not None:
        problems += _api_problem("CustomJob", types.CustomJob.from_json, json.dumps(job))
    return problems
