"""``tfcluster export --to tfjob``: the spec as a Kubeflow TFJob (kubeflow.org/v1).

One replica spec per task type (Chief, Worker, PS, Evaluator), each a pod template with one
container named ``tensorflow`` whose port ``tfjob-port`` is the spec's ``ports.base``. The operator
(training-operator v1.9.0) creates the pods and services and sets TF_CONFIG in every replica
(addresses ``<job>-<type>-<index>.<namespace>.svc:<port>``), so the manifest never sets it.
Secret env values are read from a Secret by reference (launcher/export/kube.py).

Pure: ``tfjob_dict`` builds the manifest; ``render_tfjob`` adds the explaining header.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Optional

from launcher.spec.model import TASK_TYPES, LoadedSpec, Spec
from launcher.export.common import (DEFAULT_PERMANENT, comment_lines, comment_text, container_env, dump_yaml, export_plan, state_dir,
                                    type_env)
from launcher.export.kube import env_entries, labels, no_expand, resources, secret_env, secret_name
from launcher.export.validate import CONTAINER_NAME, PORT_NAME, TFJOB_API_VERSION

REPLICA_TYPE = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}


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


def tfjob_dict(loaded: LoadedSpec, image: Optional[str] = None) -> dict[str, Any]:
    spec = loaded.spec
    plan = export_plan(spec)
    k8s = spec.kubernetes
    policy, backoff, _ = restart_mapping(spec)
    common_env = container_env(spec, plan)
    env = env_entries(common_env, secret_env(common_env), secret_name(spec))
    argv = [no_expand(a) for a in spec.argv]
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
            "env": copy.deepcopy(env) + [{"name": k, "value": v} for k, v in type_env(spec, task_type)],
            "ports": [{"name": PORT_NAME, "containerPort": spec.ports.base}],
        }
        if spec.docker.pull == "never":
            container["imagePullPolicy"] = "Never"
        limits = resources(spec, task_type)
        if limits:
            container["resources"] = limits
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
        "metadata": {"name": spec.name, "namespace": k8s.namespace, "labels": labels(spec)},
        "spec": job_spec,
    }


def render_tfjob(loaded: LoadedSpec, doc: dict[str, Any], header: str, out_name: str,
                 secret_file: Optional[str] = None) -> str:
    spec = loaded.spec
    ns = doc["metadata"]["namespace"]
    replicas = ", ".join(f"{t} x{r['replicas']}" for t, r in doc["spec"]["tfReplicaSpecs"].items())
    first = next(iter(doc["spec"]["tfReplicaSpecs"])).lower()
    _, _, restart_note = restart_mapping(spec)
    success = ("the Chief succeeds" if "Chief" in doc["spec"]["tfReplicaSpecs"]
               else "all Workers succeed (successPolicy AllWorkers)")
    state = state_dir(spec)
    apply = f"kubectl apply -f {secret_file} && kubectl apply -f {out_name}" if secret_file else f"kubectl apply -f {out_name}"
    first_line = f"{header} from {comment_text(loaded.path.name)} (--to tfjob); edit the spec and regenerate rather than this file."
    text = f"""\
TFJob '{spec.name}' ({spec.strategy}): {replicas}, namespace {ns}.
Submit: {apply}   (needs the Kubeflow training operator, kubeflow.org/v1)
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
