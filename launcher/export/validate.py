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


@lru_cache(maxsize=2)
def crd_schema(name: str) -> dict[str, Any]:
    """``spec.versions[0].schema.openAPIV3Schema`` of a vendored CRD (launcher/schemas/)."""
    text = resources.files("launcher").joinpath("schemas", name).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def tfjob_schema() -> dict[str, Any]:
    return crd_schema(CRD_FILE)


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _schema_problems(doc: Any, schema: Optional[dict[str, Any]] = None, kind: str = "TFJob") -> list[str]:
    import jsonschema

    validator = jsonschema.Draft4Validator(tfjob_schema() if schema is None else schema)
    problems = []
    for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        problems.append(f"{_path(err.absolute_path)}: {err.message} ({kind} CRD schema)")
    return problems


def _unknown_fields(node: Any, schema: dict[str, Any], parts: tuple, kind: str = "TFJob") -> list[str]:
    """Keys the structural schema does not declare (the API server would prune them)."""
    problems: list[str] = []
    if isinstance(node, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or (props is None and extra is None):
            return problems  # free-form (metadata is checked on its own)
        for key, value in node.items():
            if props is not None and key in props:
                problems += _unknown_fields(value, props[key], parts + (key,), kind)
            elif isinstance(extra, dict):
                problems += _unknown_fields(value, extra, parts + (key,), kind)
            else:
                problems.append(f"{_path(parts + (key,))}: unknown field (not in the {kind} CRD schema)")
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(node):
            problems += _unknown_fields(item, schema["items"], parts + (i,), kind)
    return problems


def _metadata_problems(meta: Any, kind: str = "TFJob") -> list[str]:
    if not isinstance(meta, dict):
        return ["metadata: required mapping with name"]
    problems = [f"metadata.{k}: unknown field (use name, namespace, labels, annotations)" for k in meta
                if k not in METADATA_KEYS]
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 63 or not DNS1035_RE.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label (lowercase letters, digits, '-', "
                        f"starting with a letter, at most 63) ({kind} webhook)")
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


# ---------------------------------------------------------------- JobSet

JOBSET_CRD_FILE = "jobset.x-k8s.io_jobsets.yaml"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
# What the JobSet webhook (v0.12.0, pkg/webhooks/jobset_webhook.go) and the batch/v1 Job API check
# that the CRD's schema does not (launcher/schemas/README.md).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy")
RULE_NAME_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
COMPLETION_MODES = ("NonIndexed", "Indexed")
JOB_RESTART_POLICIES = ("Never", "OnFailure")
POD_NAME_SUFFIX = "-abcde"  # the 5 random characters Kubernetes appends to a Job's pod


def jobset_schema() -> dict[str, Any]:
    return crd_schema(JOBSET_CRD_FILE)


def _dns1035(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS1035_RE.fullmatch(value))


def validate_jobset(doc: Any) -> list[str]:
    """Every problem of a JobSet manifest, one line each."""
    if not isinstance(doc, dict):
        return ["(top level): a JobSet is a mapping"]
    schema = jobset_schema()
    problems = _schema_problems(doc, schema, "JobSet")
    problems += _unknown_fields({k: v for k, v in doc.items() if k != "metadata"}, schema, (), "JobSet")
    if doc.get("apiVersion") != JOBSET_API_VERSION or doc.get("kind") != "JobSet":
        problems.append(f"apiVersion/kind: {doc.get('apiVersion')!r}/{doc.get('kind')!r}; "
                        f"must be {JOBSET_API_VERSION}/JobSet")
    problems += _metadata_problems(doc.get("metadata"), "JobSet")
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    subdomain = (spec.get("network") or {}).get("subdomain") if isinstance(spec.get("network"), dict) else None
    if subdomain is not None and not _dns1035(subdomain):
        problems.append(f"spec.network.subdomain: {subdomain!r} is not a DNS-1035 label (it names a Service) "
                        "(JobSet webhook)")
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        return problems + ["spec.replicatedJobs: required; give at least one replicated job"]
    names: list[str] = []
    for i, rjob in enumerate(jobs):
        if isinstance(rjob, dict):
            problems += _replicated_job_problems(f"spec.replicatedJobs[{i}]", str(name), rjob)
            names.append(rjob.get("name"))
    for dup in sorted({n for n in names if names.count(n) > 1}, key=str):
        problems.append(f"spec.replicatedJobs: name {dup!r} is used twice")
    return problems + _policy_problems(spec, names)


def _policy_problems(spec: dict, names: list[str]) -> list[str]:
    problems = []
    success = spec.get("successPolicy") if isinstance(spec.get("successPolicy"), dict) else {}
    for target in success.get("targetReplicatedJobs") or []:
        if target not in names:
            problems.append(f"spec.successPolicy.targetReplicatedJobs: {target!r} is not a replicated job (JobSet webhook)")
    failure = spec.get("failurePolicy") if isinstance(spec.get("failurePolicy"), dict) else {}
    for i, rule in enumerate(failure.get("rules") or []):
        where = f"spec.failurePolicy.rules[{i}]"
        if not isinstance(rule, dict):
            continue
        rule_name = rule.get("name")
        if not isinstance(rule_name, str) or len(rule_name) > 128 or not RULE_NAME_RE.fullmatch(rule_name):
            problems.append(f"{where}.name: {rule_name!r} must match {RULE_NAME_RE.pattern} (JobSet webhook)")
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in names:
                problems.append(f"{where}.targetReplicatedJobs: {target!r} is not a replicated job (JobSet webhook)")
        for reason in rule.get("onJobFailureReasons") or []:
            if reason not in JOB_FAILURE_REASONS:
                problems.append(f"{where}.onJobFailureReasons: {reason!r} is not one of {', '.join(JOB_FAILURE_REASONS)}")
    if isinstance(spec.get("replicatedJobs"), list) and spec["replicatedJobs"]:
        first = spec["replicatedJobs"][0]
        if isinstance(first, dict) and first.get("dependsOn"):
            problems.append("spec.replicatedJobs[0].dependsOn: the first replicated job cannot depend on another")
    return problems


def _replicated_job_problems(where: str, jobset: str, rjob: dict) -> list[str]:
    problems = []
    rname = rjob.get("name")
    if not _dns1035(rname):
        problems.append(f"{where}.name: {rname!r} is not a DNS-1035 label")
    replicas = rjob.get("replicas", 1)
    job = (rjob.get("template") or {}).get("spec") if isinstance(rjob.get("template"), dict) else None
    job = job if isinstance(job, dict) else {}
    completions = job.get("completions")
    if isinstance(replicas, int) and isinstance(rname, str):
        longest_job = f"{jobset}-{rname}-{replicas - 1}"
        if not _dns1035(longest_job):
            problems.append(f"{where}.name: its Job name {longest_job!r} is not a DNS-1035 label of at most 63 "
                            "(JobSet webhook); shorten the JobSet's name")
        if job.get("completionMode") == "Indexed" and isinstance(completions, int):
            pod = f"{longest_job}-{completions - 1}{POD_NAME_SUFFIX}"
            if not _dns1035(pod):
                problems.append(f"{where}.name: its pod name {pod!r} is not a DNS-1035 label of at most 63 "
                                "(JobSet webhook); shorten the JobSet's name")
    mode = job.get("completionMode")
    if mode is not None and mode not in COMPLETION_MODES:
        problems.append(f"{where}.template.spec.completionMode: {mode!r} is not one of {', '.join(COMPLETION_MODES)}")
    return problems + _pod_problems(f"{where}.template.spec", job)


def _pod_problems(where: str, job: dict) -> list[str]:
    """The batch/v1 Job API's rules on its pod template (the CRD's schema leaves them out)."""
    problems = []
    pod = (job.get("template") or {}).get("spec") if isinstance(job.get("template"), dict) else None
    pod = pod if isinstance(pod, dict) else {}
    policy = pod.get("restartPolicy")
    if policy is not None and policy not in JOB_RESTART_POLICIES:
        problems.append(f"{where}.template.spec.restartPolicy: {policy!r}; a Job's pods take Never or OnFailure")
    pfp = job.get("podFailurePolicy") if isinstance(job.get("podFailurePolicy"), dict) else None
    if pfp is not None and policy != "Never":
        problems.append(f"{where}.podFailurePolicy: needs the pods' restartPolicy Never (Job API)")
    for i, rule in enumerate((pfp or {}).get("rules") or []):
        codes = (rule.get("onExitCodes") or {}) if isinstance(rule, dict) else {}
        values = codes.get("values") or []
        if values != sorted(set(values)) or len(values) > 255:
            problems.append(f"{where}.podFailurePolicy.rules[{i}].onExitCodes.values: must be unique, ascending, "
                            "at most 255 (Job API)")
        if codes.get("operator") == "In" and 0 in values:
            problems.append(f"{where}.podFailurePolicy.rules[{i}].onExitCodes.values: 0 cannot be used with In (Job API)")
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        return problems + [f"{where}.template.spec.containers: required"]
    for i, c in enumerate(containers):
        if isinstance(c, dict) and not c.get("image"):
            problems.append(f"{where}.template.spec.containers[{i}].image: required")
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
