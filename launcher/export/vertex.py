"""``tfcluster export --to vertex``: the spec as a Vertex AI CustomJob.

Vertex reads the worker pools by position: [0] the primary replica (TF_CONFIG type ``chief``,
exactly one replica), [1] workers, [2] parameter servers, [3] evaluators; an unused pool before a
used one is ``{}``. A spec without a chief (MultiWorkerMirroredStrategy over workers) puts worker 0
in pool 0: TensorFlow then calls it ``chief``, which MWMS treats as a worker that also saves.
Vertex sets TF_CONFIG and CLUSTER_SPEC itself and picks the port; the job never sets them.

Two documents: the CustomJobSpec (YAML for ``gcloud ai custom-jobs create --config``, camelCase
keys) and the CustomJob (JSON for the REST API: displayName, labels, jobSpec).
Pure: nothing here touches the disk. Facts and their sources: launcher/schemas/README.md.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from launcher.errors import SpecError
from launcher.export.generated import JSON_LABEL
from launcher.plan.build import is_secret
from launcher.spec.model import LoadedSpec, Spec
from launcher.export.common import comment_lines, comment_text, container_env, dump_yaml, export_plan, state_dir, type_env, type_gpus
from launcher.export.validate import VERTEX_POOLS

DEFAULT_MACHINE_TYPE = "n1-standard-4"


def pools(spec: Spec) -> list[tuple[str, int, str]]:
    """(pool role, replica count, task type whose ``vertex.machines`` entry applies), in Vertex order."""
    t = spec.tasks
    chief, workers = t.count("chief"), t.count("worker")
    out = []
    if chief:
        out += [("chief", chief, "chief"), ("worker", workers, "worker")]
    else:  # worker 0 is the primary replica
        out += [("chief", min(workers, 1), "worker"), ("worker", max(workers - 1, 0), "worker")]
    out += [("ps", t.count("ps"), "ps"), ("evaluator", t.count("evaluator"), "evaluator")]
    assert [p[0] for p in out] == list(VERTEX_POOLS)
    return out


def _machine(spec: Spec, task_type: str) -> tuple[dict[str, Any], Optional[dict[str, Any]]]:
    m = spec.vertex.machines.merged(task_type)
    machine: dict[str, Any] = {"machineType": m.get("machine_type") or DEFAULT_MACHINE_TYPE}
    count = m.get("accelerator_count")
    own = spec.vertex.machines.own(task_type)
    derived = type_gpus(spec, task_type)
    if "accelerator_count" not in own and "accelerator_type" not in own and derived is not None:
        # The spec's GPUs per task (gpus_per_task N; none for the ps and the parameter_server
        # chief) decide the count; the type comes from the machines' entries.
        if derived == 0:
            m = {k: v for k, v in m.items() if not k.startswith("accelerator_")}
            count = None
        elif not m.get("accelerator_type"):
            raise SpecError(f"vertex.machines.{task_type}.accelerator_type: each {task_type} replica needs "
                            f"{derived} GPU(s) (devices.gpus_per_task / tasks.{task_type}.gpus) but no accelerator "
                            "type is set; set vertex.machines.default.accelerator_type (e.g. NVIDIA_TESLA_T4) "
                            "and a machine_type that takes it")
        else:
            count = derived
    if m.get("accelerator_type"):
        machine["acceleratorType"] = m["accelerator_type"]
        machine["acceleratorCount"] = 1 if count is None else count
    elif count:
        raise SpecError(f"vertex.machines.{task_type}.accelerator_count: {count} accelerators of no type; set "
                        "accelerator_type (e.g. NVIDIA_TESLA_T4) for this type or in default")
    disk = {k: m[s] for k, s in (("bootDiskType", "boot_disk_type"), ("bootDiskSizeGb", "boot_disk_size_gb"))
            if m.get(s) is not None}
    return machine, (disk or None)


def restart_note(spec: Spec) -> str:
    r = spec.restart
    if r.max_restarts == 0:
        return "restart.max_restarts 0 -> scheduling.disableRetries: Vertex does not retry after internal errors."
    group = spec.strategy != "parameter_server"
    how = ("restartJobOnWorkerRestart true: a restarted worker restarts the whole job (as tfcluster's MWMS group "
           "restart)" if group else "restartJobOnWorkerRestart false: a restarted worker rejoins alone, as "
           "tfcluster restarts a single PSS worker")
    return (f"{how}. restart.max_restarts {r.max_restarts} and permanent_exit_codes are not mapped: Vertex "
            "retries replicas after its own internal errors only, as often as it decides.")


def job_spec_dict(loaded: LoadedSpec, image: Optional[str] = None) -> dict[str, Any]:
    """The CustomJobSpec (what ``gcloud ... --config`` reads)."""
    spec = loaded.spec
    plan = export_plan(spec)
    env = [{"name": k, "value": v} for k, v in container_env(spec, plan).items()]
    argv = list(spec.argv)
    container = {"imageUri": image or spec.docker.image, "command": argv[:1], "args": argv[1:], "env": env}
    specs: list[dict[str, Any]] = []
    for _role, count, task_type in pools(spec):
        if not count:
            specs.append({})
            continue
        machine, disk = _machine(spec, task_type)
        pool: dict[str, Any] = {"machineSpec": machine, "replicaCount": count}
        if disk:
            pool["diskSpec"] = disk
        pool["containerSpec"] = json.loads(json.dumps(container))  # own copy: no YAML anchors
        pool["containerSpec"]["env"] += [{"name": k, "value": v} for k, v in type_env(spec, task_type)]
        specs.append(pool)
    while specs and not specs[-1]:
        specs.pop()  # trailing unused pools are left out
    scheduling: dict[str, Any] = {}
    if spec.restart.max_restarts == 0:
        scheduling["disableRetries"] = True
    else:
        scheduling["restartJobOnWorkerRestart"] = spec.strategy != "parameter_server"
    if spec.vertex.timeout is not None:
        scheduling["timeout"] = f"{spec.vertex.timeout}s"
    out: dict[str, Any] = {"workerPoolSpecs": specs, "scheduling": scheduling}
    if spec.vertex.base_output_directory:
        out["baseOutputDirectory"] = {"outputUriPrefix": spec.vertex.base_output_directory}
    if spec.vertex.service_account:
        out["serviceAccount"] = spec.vertex.service_account
    return out


def custom_job_dict(loaded: LoadedSpec, image: Optional[str] = None) -> dict[str, Any]:
    """The CustomJob resource (what projects.locations.customJobs.create takes)."""
    return {
        "displayName": loaded.spec.name,
        "labels": dict([JSON_LABEL]),  # also tfcluster's mark that it may overwrite the file
        "jobSpec": job_spec_dict(loaded, image),
    }


def render_job_spec_yaml(loaded: LoadedSpec, job_spec: dict[str, Any], header: str, out_name: str,
                         json_name: Optional[str], ran: tuple[str, ...] = ("google.cloud.aiplatform_v1 types",
                                                                            "tfcluster's pool rules"),
                         skipped: tuple[str, ...] = ()) -> str:
    """The .yaml with its explaining header; the header says exactly which checks ``ran`` and which
    were ``skipped`` (and why): "Validated" only for what was."""
    spec = loaded.spec
    used = [f"[{i}] {role} x{count}" for i, (role, count, _t) in enumerate(pools(spec)) if count]
    primary = "the chief" if spec.tasks.count("chief") else "worker 0 (TF_CONFIG calls it chief)"
    first_line = f"{header} from {comment_text(loaded.path.name)} (--to vertex); edit the spec and regenerate rather than this file."
    text = f"""\
Vertex AI CustomJobSpec for '{spec.name}' ({spec.strategy}): pools {', '.join(used)}; pool 0 runs {primary}.
Submit: gcloud ai custom-jobs create --region REGION --display-name {spec.name} --config {out_name}
{f'REST API body (CustomJob): {json_name}' if json_name else 'REST API body (CustomJob JSON): written beside the .yaml unless the output is stdout.'}
{_checked(ran, skipped)}
Vertex sets TF_CONFIG and CLUSTER_SPEC in every replica and picks the port (ports.base is not used).
Restarts: {restart_note(spec)}
State: TFCLUSTER_STATE_DIR={state_dir(spec)}{'' if spec.state.is_url else ' is on the replica: a restarted job starts without the backup; set state.dir: gs://... to resume'}.
The image must be in a registry Vertex can pull from (Artifact Registry).{_secrets_note(job_spec)}"""
    return "\n".join([first_line, *comment_lines(text)]) + "\n" + dump_yaml(job_spec)


def _secrets_note(job_spec: dict[str, Any]) -> str:
    names = secret_names(job_spec)
    if not names:
        return ""
    return (f"\nSecrets: {', '.join(names)} are in clear here, as the Vertex API takes env values: this file and its "
            ".json are written readable by you alone (0600); keep them out of version control.")


def _checked(ran: tuple[str, ...], skipped: tuple[str, ...]) -> str:
    if not skipped:
        return f"Validated offline ({' and '.join(ran)}); not run here."
    return "\n".join([f"Checked offline with {' and '.join(ran)} only; not run here.",
                      *(f"NOT checked: {what}." for what in skipped)])


def secret_names(job_spec: dict[str, Any]) -> list[str]:
    """The variables of the pools' ``containerSpec.env`` that are secrets (``is_secret``): the
    Vertex API takes only values there, so the files hold them and are written for their owner only."""
    return sorted({e["name"] for pool in job_spec.get("workerPoolSpecs", []) for e in pool.get("containerSpec", {}).get("env", [])
                   if is_secret(e["name"], e["value"])})


def render_custom_job_json(job: dict[str, Any]) -> str:
    return json.dumps(job, indent=2) + "\n"
