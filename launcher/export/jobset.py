"""``tfcluster export --to jobset``: the spec as a Kubernetes JobSet (jobset.x-k8s.io/v1alpha2), e.g. on GKE.

One replicated job per task type (``chief``, ``worker``, ``ps``, ``evaluator``), each one Indexed
Job (``replicas: 1``, ``completions = parallelism =`` the type's count): a pod's index
(``JOB_COMPLETION_INDEX``) is its task index, and with ``network.enableDNSHostnames`` its stable
address is ``<name>-<type>-0-<index>.<subdomain>`` (the subdomain: the JobSet's name).

Nothing in JobSet sets TF_CONFIG: every container runs tfcluster's pod helper
(launcher/remote/jobsetpod.py, /usr/local/lib/tfcluster/jobsetpod.py in the worker image) under
the image's tini, with the cluster's layout (names, counts, the port) and its type; the helper
writes the TF_CONFIG ``tfcluster plan`` gives that task, with those addresses, and execs the
entrypoint. The evaluator is not in the cluster.

Restarts: a Job fails at its first failed pod (``backoffLimit: 0``, pods ``restartPolicy: Never``)
and the JobSet then recreates all its Jobs, up to ``failurePolicy.maxRestarts =
restart.max_restarts`` times: tfcluster's group restart. ``restart.permanent_exit_codes``: the Job's
``podFailurePolicy`` fails it at once (reason PodFailurePolicy) on those codes and a
``failurePolicy`` rule then fails the JobSet without a restart.

Pure: ``jobset_dict`` builds the manifest, ``render_jobset`` adds the explaining header.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Optional

from launcher.contract import envnames
from launcher.export.common import (FlowList, comment_lines, comment_text, container_env, dump_yaml, export_plan, state_dir,
                                    type_env)
from launcher.export.kube import env_entries, labels, no_expand, resources, secret_env, secret_name
from launcher.export.validate import CONTAINER_NAME, JOBSET_API_VERSION
from launcher.plan.build import Plan
from launcher.spec.model import TASK_TYPES, LoadedSpec, Spec

# Where the worker image keeps them (docker/Dockerfile).
TINI = "/usr/local/bin/tini"
POD_HELPER = "/usr/local/lib/tfcluster/jobsetpod.py"
PORT_NAME = "tf-server"
SHM_VOLUME = "dshm"
PERMANENT_RULE = "permanentExitCode"
# Parameter servers and workers serve first (InOrder waits for each replicated job's pods to be
# Ready: their TF server's port answers), then the chief that dials them, then the evaluator.
PSS_ORDER = ("ps", "worker", "chief", "evaluator")
# The JobSet controller labels every pod with the set's restart attempt (0, 1, ...): the task's
# TFCLUSTER_RESTART_COUNT, as `tfcluster up` gives it, through the downward API.
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
_SIZE_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi"}


def layout(spec: Spec, plan: Plan) -> dict[str, Any]:
    """What the pod helper needs to make any task's TF_CONFIG: names, the port and the cluster's
    types with their counts in TF_CONFIG's order (None: a single-host strategy, no cluster)."""
    cluster = plan.tasks[0].cluster if plan.tasks else None
    return {
        "jobset": spec.name,
        "subdomain": spec.name,
        "port": spec.ports.base,
        "cluster": None if cluster is None else [[t, len(members)] for t, members in cluster.jobs],
    }


def type_order(spec: Spec) -> tuple[list[str], Optional[str]]:
    """The replicated jobs' order and the startupPolicy order (None: no startupPolicy)."""
    present = [t for t in TASK_TYPES if spec.tasks.count(t)]
    if spec.strategy == "parameter_server":
        return [t for t in PSS_ORDER if t in present], "InOrder"
    return present, None


def permanent_codes(spec: Spec) -> list[int]:
    """The exit codes a pod failure policy can name (1-255: the API refuses 0 with In)."""
    if not spec.restart.max_restarts:
        return []
    return sorted({c for c in spec.restart.permanent_exit_codes if 0 < c < 256})


def shm_volume(spec: Spec) -> dict[str, Any]:
    """/dev/shm as a memory-backed emptyDir (a pod's own is 64 MiB); docker.shm_size bounds it."""
    empty: dict[str, Any] = {"medium": "Memory"}
    size = spec.docker.shm_size
    if size:
        unit = size[-1].lower()
        empty["sizeLimit"] = size[:-1] + _SIZE_UNITS[unit] if unit in _SIZE_UNITS else size.rstrip("bB")
    return {"name": SHM_VOLUME, "emptyDir": empty}


def _container(spec: Spec, task_type: str, image: str, env: list[dict], args: list[str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": [TINI, "-g", "--", "python", POD_HELPER],
        "args": args,
        "env": copy.deepcopy(env) + [{"name": k, "value": v} for k, v in type_env(spec, task_type)],
    }
    if task_type != "evaluator":  # the evaluator serves nothing (it is not in the cluster)
        container["ports"] = [{"name": PORT_NAME, "containerPort": spec.ports.base}]
        if spec.strategy == "parameter_server" and task_type in ("ps", "worker"):
            container["readinessProbe"] = {"tcpSocket": {"port": spec.ports.base}, "periodSeconds": 2}
    if spec.docker.pull == "never":
        container["imagePullPolicy"] = "Never"
    limits = resources(spec, task_type)
    if limits:
        container["resources"] = limits
    container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    return container


def _job(spec: Spec, task_type: str, container: dict[str, Any]) -> dict[str, Any]:
    count = spec.tasks.count(task_type)
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [shm_volume(spec)],
        "terminationGracePeriodSeconds": math.ceil(spec.watchdog.stop_grace),
    }
    if spec.kubernetes.service_account:
        pod["serviceAccountName"] = spec.kubernetes.service_account
    job: dict[str, Any] = {"completionMode": "Indexed", "completions": count, "parallelism": count, "backoffLimit": 0}
    codes = permanent_codes(spec)
    if codes:
        job["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": CONTAINER_NAME, "operator": "In", "values": FlowList(codes)}}]}
    if spec.kubernetes.active_deadline_seconds is not None:
        job["activeDeadlineSeconds"] = spec.kubernetes.active_deadline_seconds
    job["template"] = {"spec": pod}
    return {"name": task_type, "replicas": 1, "template": {"spec": job}}


def jobset_dict(loaded: LoadedSpec, image: Optional[str] = None) -> dict[str, Any]:
    spec = loaded.spec
    plan = export_plan(spec)
    common_env = container_env(spec, plan)
    env = [{"name": e["name"], "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{RESTART_LABEL}']"}}}
           if e["name"] == envnames.RESTART_COUNT else e
           for e in env_entries(common_env, secret_env(common_env), secret_name(spec))]
    cluster = json.dumps(layout(spec, plan), separators=(",", ":"))
    argv = [no_expand(a) for a in spec.argv]
    order, startup = type_order(spec)
    jobs = []
    for task_type in order:
        args = ["--layout", no_expand(cluster), "--type", task_type, "--task-var", envnames.TASK, "--", *argv]
        jobs.append(_job(spec, task_type, _container(spec, task_type, image or spec.docker.image, env, args)))
    failure: dict[str, Any] = {"maxRestarts": spec.restart.max_restarts}
    if permanent_codes(spec):
        failure["rules"] = [{"name": PERMANENT_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
    body: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "subdomain": spec.name},
        "failurePolicy": failure,
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [plan.success_task.split(":")[0]]},
    }
    if startup:
        body["startupPolicy"] = {"startupPolicyOrder": startup}
    if spec.kubernetes.ttl_seconds_after_finished is not None:
        body["ttlSecondsAfterFinished"] = spec.kubernetes.ttl_seconds_after_finished
    body["replicatedJobs"] = jobs
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": spec.name, "namespace": spec.kubernetes.namespace, "labels": labels(spec)},
        "spec": body,
    }


def restart_note(spec: Spec) -> str:
    r = spec.restart
    if not r.max_restarts:
        return "restart.max_restarts 0 -> failurePolicy.maxRestarts 0: the first failed pod fails the JobSet."
    codes = permanent_codes(spec)
    permanent = (f" Exit codes {_ranges(codes)} (restart.permanent_exit_codes) fail the JobSet at once (the Jobs' "
                 "podFailurePolicy, a failurePolicy rule)." if codes else " Every failure is retried.")
    return (f"restart.max_restarts {r.max_restarts} -> failurePolicy.maxRestarts {r.max_restarts}: a failed pod "
            "fails its Job and the JobSet recreates every Job (tfcluster's group restart)." + permanent)


def _ranges(codes: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(codes):
        start = c if start is None else start
        if i + 1 == len(codes) or codes[i + 1] != c + 1:
            out.append(str(c) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def render_jobset(loaded: LoadedSpec, doc: dict[str, Any], header: str, out_name: str,
                  secret_file: Optional[str] = None) -> str:
    spec = loaded.spec
    body = doc["spec"]
    jobs = ", ".join(f"{j['name']} x{j['template']['spec']['completions']}" for j in body["replicatedJobs"])
    first = body["replicatedJobs"][0]["name"]
    success = body["successPolicy"]["targetReplicatedJobs"][0]
    startup = ("startupPolicy InOrder: " + " -> ".join(j["name"] for j in body["replicatedJobs"])
               + " (each waits for the previous one's pods to be Ready: their TF server port answers)."
               if "startupPolicy" in body else
               "No startupPolicy: every task waits for the others itself (MultiWorkerMirroredStrategy's "
               "collective setup), so they start in any order.")
    apply = f"kubectl apply -f {secret_file} && kubectl apply -f {out_name}" if secret_file else f"kubectl apply -f {out_name}"
    text = f"""\
JobSet '{spec.name}' ({spec.strategy}): {jobs}, namespace {doc['metadata']['namespace']}.
Submit: {apply}   (needs the JobSet controller, jobset.x-k8s.io/v1alpha2)
Validated offline against the JobSet v0.12.0 CRD schema and its webhook rules; not run here.
Each pod runs {POD_HELPER} (tfcluster's worker image has it): it sets the task's
  TF_CONFIG from JOB_COMPLETION_INDEX ({spec.name}-{first}-0-0.{spec.name}:{spec.ports.base}...), then execs the entrypoint.
The JobSet succeeds when the {success} Job does; it then deletes the Jobs still running.
{startup}
Restarts: {restart_note(spec)}
  Not the same as `tfcluster up`: no per-task restart (a PSS worker too restarts the whole set),
  no backoff between restarts, no hang or startup watchdog (bound a job with kubernetes.active_deadline_seconds).
State: TFCLUSTER_STATE_DIR={state_dir(spec)}{'' if spec.state.is_url else ' is on the pod: a restart starts without the backup; set state.dir: gs://... to resume'}."""
    head = f"{header} from {comment_text(loaded.path.name)} (--to jobset); edit the spec and regenerate rather than this file."
    return "\n".join([head, *comment_lines(text)]) + "\n" + dump_yaml(doc)
