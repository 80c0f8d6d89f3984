"""``tfcluster compose``: the plan as a standalone docker-compose.yml.

One service per task, named like the task's address in TF_CONFIG (``worker-0``), all on one
private network, with named volumes for the state (checkpoints, BackupAndRestore backups) and
the run directory. The file never asks compose to restart a container: compose restarts them
one at a time, which MultiWorkerMirroredStrategy cannot recover from; ``tfcluster up`` with
``backend: docker`` applies the group restart policy instead.

GPUs: each service that uses GPUs reserves its share of this machine's GPUs (``nvidia-smi -L``
here; the docker backend's arithmetic, launcher/plan/containergpus.py) as
``deploy.resources.reservations.devices`` (driver nvidia, ``device_ids``, capability gpu) and gets
``shm_size`` (docker.shm_size; 1g with GPUs), within this machine's CUDA_VISIBLE_DEVICES (its
GPUs by UUID where that names UUIDs; a MIG device by its ``MIG-`` UUID, one per service). On a machine without GPUs, ``gpus_per_task: N``
services get ids 0.. as if the host had what they need, and auto ones none (the header says so).

``compose_dict`` builds a dict from the spec (reading only nvidia-smi); only ``write_compose``
touches the disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml

from launcher.contract import envnames
from launcher.plan import containergpus as docker_gpus
from launcher.plan import gpus as plan_gpus
from launcher.errors import SpecError
from launcher.backends import compose_kind
from launcher.bounded import yaml_comment as comment_text
from launcher.export.generated import MARKER, check_overwritable, resolve_output, write_atomic
from launcher.plan.build import Plan, build_plan, is_secret
from launcher.spec.model import IMAGE_RE, LoadedSpec, Spec

HEADER = MARKER + " compose`"
# Where the image keeps state and run files (docker/Dockerfile creates them for its user).
STATE_DIR = "/tfcluster/state"
RUN_DIR = "/tfcluster/run"
NETWORK = "tfcluster"
STATE_VOLUME = "state"
RUN_VOLUME = "run"


def docker_plan(spec: Spec) -> tuple[Plan, str]:
    """The plan as containers (every task on its own host named like its address, all on this
    machine, the compose host: launcher/plan/containergpus.py, as the docker backend places
    them), with this machine's GPUs; and a header note about them ("" when there is nothing to
    say). Each service's env is its planned task's."""
    docker = compose_kind()  # the backend whose plan compose writes (BackendKind.plans_compose)
    spec = spec.model_copy(update={"backend": docker.name})
    if not docker_gpus.asked(spec):
        return build_plan(spec, docker_gpus.placement(spec)), ""
    here = plan_gpus.local_gpus()
    host = here
    note = ""
    if not here:
        need = sum(t for t in (plan_gpus.take_of(spec, t)[0] for t, _ in docker_gpus.task_keys(spec))
                   if isinstance(t, int))
        host = tuple((i, "", "") for i in range(need))
        note = ("this machine has no NVIDIA GPU (nvidia-smi -L): services with a GPU count reserve GPUs 0.. as if "
                "the host had them, the others none; regenerate on the GPU host")
    # This machine's CUDA_VISIBLE_DEVICES bounds the services' GPUs as it bounds the docker backend's
    # containers (indices or UUIDs: each service gets a subset, by UUID where it names UUIDs).
    limit = docker_gpus.launcher_limit().get(docker_gpus.HOST) if here else None
    problems = docker_gpus.refused(spec, host, limit)
    if problems:
        raise SpecError(f"devices: {problems[0].replace(docker_gpus.HOST, 'this machine (the compose host)')}")
    return build_plan(spec, docker_gpus.placement(spec, host, limit=limit)), note


def _escape(value: str) -> str:
    """Compose interpolates ``$VAR``; ``$$`` is a literal dollar."""
    return value.replace("$", "$$")


def _value(name: str, value: str) -> str:
    """A variable's value as the file holds it: a secret (``is_secret``) is not written but
    referred to, ``${NAME:?...}``, which compose fills from the environment it runs in (and
    refuses to run without); any other value is literal."""
    if is_secret(name, value):
        return f"${{{name}:?{SECRET_UNSET.format(name=name)}}}"
    return _escape(value)


# What compose says when a secret the file refers to is not set.
SECRET_UNSET = "set {name} in the environment docker compose runs in"


def secret_names(doc: dict[str, Any]) -> list[str]:
    """The variables ``doc`` refers to rather than holds (``_value``), each once."""
    names = set()
    for service in doc.get("services", {}).values():
        for where in (service.get("environment", {}), service.get("build", {}).get("args", {})):
            names.update(k for k, v in where.items() if v.startswith(f"${{{k}:?"))  # (a literal $ is $$)
    return sorted(names)


def _rel(path: Path, base: Path) -> str:
    rel = os.path.relpath(path, base)
    if rel == "." or rel.startswith(".."):
        return rel
    return "./" + rel  # compose reads a bare name in volumes as a named volume


# Where compose expects the worker image's context when docker.build names none (compose writes a note).
PACKAGED_CONTEXT = "tfcluster-image"


def compose_dict(loaded: LoadedSpec, out_dir: Path, image: Optional[str] = None) -> dict[str, Any]:
    """The compose document for ``loaded``; relative paths are relative to ``out_dir``."""
    spec = loaded.spec
    opts = spec.docker
    plan, _ = docker_plan(spec)
    image = image or opts.image
    build: Optional[dict[str, Any]] = None
    if opts.build is not None:
        if opts.build.packaged:  # tfcluster's own worker image: `tfcluster image print --context DIR` makes it
            build = {"context": f"./{PACKAGED_CONTEXT}", "dockerfile": "Dockerfile"}
        else:
            context = (loaded.base_dir / (opts.build.context or ".")).resolve()
            build = {"context": _escape(_rel(context, out_dir)),
                     "dockerfile": _escape(opts.build.file)}
        args = dict(opts.build.args)
        if opts.build.base_image:
            args["BASE_IMAGE"] = opts.build.base_image
        if args:
            build["args"] = {k: _value(k, v) for k, v in sorted(args.items())}  # (keys: ENV_RE names, no $)
        if opts.build.network:
            build["network"] = _escape(opts.build.network)
    extra_volumes = []
    for item in opts.volumes:
        host, _, rest = item.partition(":")
        host_path = Path(host).expanduser()
        if not host_path.is_absolute():
            host_path = (loaded.base_dir / host_path).resolve()
        extra_volumes.append(_escape(f"{_rel(host_path, out_dir)}:{rest}"))

    services: dict[str, Any] = {}
    for i, task in enumerate(plan.tasks):
        gpu = docker_gpus.container(task, spec.docker.shm_size)
        env = dict(task.env)
        # threads: auto: this machine's cores are not the compose host's; the budget is made where a
        # backend starts the task, which compose does not (TensorFlow's own defaults then).
        env.pop(envnames.THREADS, None)
        env.update(
            {
                envnames.STATE_DIR: STATE_DIR,
                envnames.RUN_DIR: RUN_DIR,
                envnames.RUN_ID: "compose",
                envnames.RESTART_COUNT: "0",
            }
        )
        service: dict[str, Any] = {"image": image}
        # Build once (first service); the others use the tag it produces.
        if build is not None and i == 0:
            service["build"] = build
        service.update(
            {
                "hostname": task.address,
                "command": [_escape(a) for a in task.command],
                "environment": {k: _value(k, v) for k, v in sorted(env.items())},
                "networks": [NETWORK],
                "volumes": [f"{STATE_VOLUME}:{STATE_DIR}", f"{RUN_VOLUME}:{RUN_DIR}", *extra_volumes],
                # Never restart one task alone: MWMS needs the whole group restarted together.
                "restart": "no",
                "stop_signal": "SIGTERM",
                "stop_grace_period": f"{spec.watchdog.stop_grace:g}s",
                "labels": {"tfcluster.name": spec.name, "tfcluster.task": task.key},
            }
        )
        if opts.user:
            service["user"] = _escape(opts.user)
        if gpu.shm_size:
            service["shm_size"] = gpu.shm_size
        if gpu.device_ids:
            service["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": [str(d) for d in gpu.device_ids], "capabilities": ["gpu"]}]}}}
        services[task.slug] = service
    return {
        "version": "3.8",
        "services": services,
        "networks": {NETWORK: {"driver": "bridge"}},
        "volumes": {STATE_VOLUME: {}, RUN_VOLUME: {}},
    }


def render_compose(loaded: LoadedSpec, out_dir: Path, image: Optional[str] = None) -> str:
    doc = compose_dict(loaded, out_dir, image)
    plan, note = docker_plan(loaded.spec)
    first = plan.tasks[0].slug if plan.tasks else "worker-0"
    success = plan.success_task.replace(":", "-")
    lines = [
        f"{HEADER} from {comment_text(loaded.path.name)}; edit the spec and regenerate rather than this file.",
        f"# Cluster '{loaded.spec.name}' ({loaded.spec.strategy}): {', '.join(plan.keys)}.",
        "# Run it (the run succeeds when " + success + " exits 0):",
        f"#   docker compose up --abort-on-container-exit --exit-code-from {success}",
        "#   docker compose down --volumes    # also forgets checkpoints and backups",
        "# No compose restart policy on purpose: compose restarts containers one by one, which",
        "# MultiWorkerMirroredStrategy cannot recover from; `tfcluster up` (backend: docker)",
        "# restarts the whole group and resumes from the backup in the state volume.",
    ]
    secrets = secret_names(doc)
    if secrets:
        lines.append(f"# Secrets are not in this file; set {', '.join(secrets)} in the environment `docker compose` runs in.")
    if note:
        lines.append(f"# GPUs: {note}.")
    if doc["services"].get(first, {}).get("build"):
        lines.append(f"# The image is built by service {first}: docker compose build {first}")
        if loaded.spec.docker.build is not None and loaded.spec.docker.build.packaged:
            lines.append(f"# Its context, tfcluster's worker image: tfcluster image print --context {PACKAGED_CONTEXT} "
                         "(beside this file) first")
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=4096)
    return "\n".join(lines) + "\n" + body


def write_compose(loaded: LoadedSpec, output: Optional[str], image: Optional[str] = None) -> Optional[Path]:
    """Write the compose file (``-`` = stdout); refuse to clobber a file tfcluster did not write."""
    if image is not None and not IMAGE_RE.fullmatch(image):
        raise SpecError(f"--image: '{image}' is not a valid image reference; use e.g. tfcluster-worker:latest")
    if output == "-":
        print(render_compose(loaded, Path.cwd(), image), end="")
        return None
    path = resolve_output(output, loaded.base_dir / "docker-compose.yml", "docker-compose.yml")
    check_overwritable(path, named=output is not None)
    write_atomic(path, render_compose(loaded, path.parent, image))
    return path
