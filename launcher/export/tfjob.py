"""``tfcluster export --to tfjob``: the spec as a Kubeflow TFJob (kubeflow.org/v1).

One replica spec per task type (Chief, Worker, PS, Evaluator), each a pod template with one
container named ``tensorflow`` whose port ``tfjob-port`` is the spec's ``ports.base``. The operator
(training-operator v1.9.0) creates the pods and services and sets TF_CONFIG in every replica
(addresses ``<job>-<type>-<index>.<namespace>.svc:<port>``), so the manifest never sets it.

Pure: ``tfjob_dict`` builds the manifest; ``render_tfjob`` adds the explaining header.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from launcher.spec.model import TASK_TYPES, LoadedSpec, Spec
from launcher.export.common import (DEFAULT_PERMANENT, comment_lines, comment_text, container_env, dump_yaml, export_plan, state_dir, type_env,
                     type_gpus)
from launcher.export.validate import CONTAINER_NAME, PORT_NAME, TFJOB_API_VERSION

REPLICA_TYPE = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "tfcluster")


def restart_mapping(spec: Spec) -> tuple[str, int, str]:
    """(restartPolicy, runPolicy.backoffLimit, one-line explanation) for ``restart:``."""
    r = spec.restart
    if r.max_restarts == 0:
        return "Never", 0, "restart.max_restarts 0 -> restartPolicy Never, backoffLimit 0: any failure fails the job."
    if r.permanent_exit_codes == ():
        return ("OnFailure", r.max_restarts, f"restart.max_restarts {r.max_restarts}, permanent_exit_codes [] -> "
                f"restartPolicy OnFailure (every failure retried), backoffLimit {r.max_restarts}.")
    assert r.permanent_exit_codes == DEFAULT_PERMANENT  # anything else is refused by inexpressible()
    return ("ExitCode", r.max_restarts, f"restart.max_restarts {r.max_restarts} -> restartPolicy ExitCode (exit "
            f"1-127 fails the job, 128-255 such as SIGKILL/OOM 137 recreates the pod), backoffLimit {r.max_restarts}.")


def _no_expand(value: str) -> str:
    """Kubernetes expands ``$(VAR)`` in command, args and env values; ``$$(`` is a literal ``$(``."""
    return value.replace("$(", "$$(")


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


def _resources(spec: Spec, task_type: str) -> Optional[dict[str, Any]]:
    r = spec.kubernetes.resources.merged(task_type)
    amounts = {k: v for k, v in (("cpu", r.get("cpu")), ("memory", r.get("memory"))) if v is not None}
    limits = dict(amounts)
    gpus = gpu_limit(spec, task_type)
    if gpus:
        limits["nvidia.com/gpu"] = gpus  # GPUs go in limits (requests default to them)
    if not limits:
        return None
    out: dict[str, Any] = {"limits": limits}
    if amounts:
        out["requests"] = amounts
    return out


def tfjob_dict(loaded: LoadedSpec, image: Optional[str] = None) -> dict[str, Any]:
    spec = loaded.spec
    plan = export_plan(spec)
    k8s = spec.kubernetes
    policy, backoff, _ = restart_mapping(spec)
    env = [{"name": k, "value": _no_expand(v)} for k, v in container_env(spec, plan).items()]
    argv = [_no_expand(a) for a in spec.argv]
    replicas: dict[str, Any] = {}
    for task_type in TASK_TYPES:
        count = spec.tasks.count(task_type)
        if not count:
            continue
        container: dict[str, Any] = {
            "name": CONTAINER_NAME,
            "image": image or spec.docker.image,
            "command": argv[:1],
            "args": argv[1:],
            # own copies: YAML would share one list through anchors
            "env": [dict(e) for e in env] + [{"name": k, "value": v} for k, v in type_env(spec, task_type)],
            "ports": [{"name": PORT_NAME, "containerPort": spec.ports.base}],
        }
        if spec.docker.pull == "never":
            container["imagePullPolicy"] = "Never"
        resources = _resources(spec, task_type)
        if resources:
            container["resources"] = resources
        pod: dict[str, Any] = {
            "containers": [container],
            "terminationGracePeriodSeconds": math.ceil(spec.watchdog.stop_grace),
        }
        if k8s.service_account:
            pod["serviceAccountName"] = k8s.service_account
        replicas[REPLICA_TYPE[task_type]] = {"replicas": count, "restartPolicy": policy, "template": {"spec": pod}}
    run_policy: dict[str, Any] = {"cleanPodPolicy": "All", "backoffLimit": backoff}
    if k8s.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = k8s.ttl_seconds_after_finished
    if k8s.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = k8s.active_deadline_seconds
    job_spec: dict[str, Any] = {"runPolicy": run_policy}
    if not spec.tasks.count("chief"):
        job_spec["successPolicy"] = "AllWorkers"
    job_spec["tfReplicaSpecs"] = replicas
    return {
        "apiVersion": TFJOB_API_VERSION,
        "kind": "TFJob",
        "metadata": {"name": spec.name, "namespace": k8s.namespace, "labels": dict([MANAGED_BY_LABEL])},
        "spec": job_spec,
    }


def render_tfjob(loaded: LoadedSpec, doc: dict[str, Any], header: str, out_name: str) -> str:
    spec = loaded.spec
    ns = doc["metadata"]["namespace"]
    replicas = ", ".join(f"{t} x{r['replicas']}" for t, r in doc["spec"]["tfReplicaSpecs"].items())
    first = next(iter(doc["spec"]["tfReplicaSpecs"])).lower()
    _, _, restart_note = restart_mapping(spec)
    success = ("the Chief succeeds" if "Chief" in doc["spec"]["tfReplicaSpecs"]
               else "all Workers succeed (successPolicy AllWorkers)")
    state = state_dir(spec)
    first_line = f"{header} from {comment_text(loaded.path.name)} (--to tfjob); edit the spec and regenerate rather than this file."
    text = f"""\
TFJob '{spec.name}' ({spec.strategy}): {replicas}, namespace {ns}.
Submit: kubectl apply -f {out_name}   (needs the Kubeflow training operator, kubeflow.org/v1)
Validated offline against the training-operator v1.9.0 TFJob CRD schema and its webhook rules; not run here.
The operator sets TF_CONFIG in every replica (e.g. {spec.name}-{first}-0.{ns}.svc:{spec.ports.base}); this file does not.
The job succeeds when {success}; cleanPodPolicy All then deletes every pod{' (ps included)' if spec.tasks.count('ps') else ''}.
Restarts: {restart_note}
  Not the same as `tfcluster up`: the operator recreates the failed pod alone (tfcluster restarts the
  whole MWMS group together), restart.backoff/max_backoff and the watchdog timeouts are not mapped,
  and v1.9.0 counts backoffLimit from container restarts of running pods, so it may not cap pods the
  ExitCode policy recreates: set kubernetes.active_deadline_seconds to bound the job.
State: TFCLUSTER_STATE_DIR={state}{'' if spec.state.is_url else ' is on the pod: a recreated pod starts without the backup; set state.dir: gs://... to resume'}."""
    return "\n".join([first_line, *comment_lines(text)]) + "\n" + dump_yaml(doc)
