"""What the export targets share: which spec keys an engine cannot express, the container's
command, environment and image, and where the state goes.

An engine (the Kubeflow operator, Vertex AI, JobSet) places and starts the tasks and gives each
its TF_CONFIG (JobSet through tfcluster's pod helper, launcher/remote/jobsetpod.py), so a spec
that pins hosts, per-task ports, host paths or another backend's options cannot be expressed:
each such key is refused with one line ``FILE:LINE: key: problem; fix`` (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import yaml

from launcher.bounded import yaml_comment as comment_text  # noqa: F401 (tfjob, vertex)
from launcher.contract import envnames
from launcher.plan import gpus
from launcher.remote import gpuplace
from launcher.export.compose import STATE_DIR
from launcher.errors import SpecError
from launcher.backends import compose_kind
from launcher.plan import containergpus
from launcher.plan.build import Placement, Plan, build_plan
from launcher.spec.model import IMAGE_RE, NOT_EXPORTED, TASK_TYPES, LoadedSpec, Spec, export_verdicts
from launcher.spec.yamlread import dotted, line_of

ENGINES = {"tfjob": "a TFJob (Kubeflow training operator)", "vertex": "a Vertex AI CustomJob",
           "jobset": "a JobSet (Kubernetes, jobset.x-k8s.io)"}
# Keras BackupAndRestore's default-like policy: exit codes 1-127 are the program's own errors.
DEFAULT_PERMANENT = tuple(range(1, 128))
# Per task: the engine tells each replica who it is (TF_CONFIG); one template serves all indices.
# THREADS: a ``threads: auto`` budget's place on a shared host: a replica there has its node (or
# its pod's CPU limit) to itself, and nothing would complete it.
PER_TASK_ENV = ("TF_CONFIG", envnames.TASK, envnames.THREADS)
# A task's GPUs as the plan gives them on a host it shares: a replica's GPUs are what its pod or
# machine was given (nvidia.com/gpu, acceleratorCount: ``type_gpus``), numbered from 0, so these
# go (unless the spec's env sets them); a type without GPUs gets CUDA_VISIBLE_DEVICES=-1 of its
# own (``type_env``: a CUDA image's NVIDIA_VISIBLE_DEVICES=all would show it the node's GPUs).
GPU_ENV = (envnames.GPUS, gpuplace.CUDA_VAR, gpuplace.ORDER_VAR, gpuplace.GROWTH_VAR, envnames.GPU_MEMORY)


def shown_path(loaded: LoadedSpec) -> str:
    """The spec's path relative to the cwd when it is below it, else absolute."""
    rel = os.path.relpath(loaded.path)
    return str(loaded.path) if rel.startswith("..") else rel


class SpecWhere:
    """``FILE:LINE: key`` for a spec key (LoadedSpec keeps no YAML nodes, so re-read the file)."""

    def __init__(self, loaded: LoadedSpec):
        self.shown = shown_path(loaded)
        try:
            self.root = yaml.compose(loaded.path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except (OSError, yaml.YAMLError):
            self.root = None

    def __call__(self, loc: tuple, message: str) -> str:
        return f"{self.shown}{line_of(self.root, loc)}: {dotted(loc)}: {message}"

    def line(self, problem: str) -> int:
        """The line number in a problem this object formatted (0 if it has none), to sort by."""
        head = problem[len(self.shown):].split(":", 2)
        return int(head[1]) if len(head) > 2 and head[1].isdigit() else 0


def inexpressible(loaded: LoadedSpec, target: str) -> list[str]:
    """One line per spec key ``target`` cannot express (empty: exportable)."""
    spec = loaded.spec
    engine = ENGINES[target]
    where = SpecWhere(loaded)
    problems: list[str] = []
    verdicts = export_verdicts(type(spec))
    # Each key the spec sets whose declaration says the export cannot express it (specmodel.Export);
    # a key declared without a verdict is refused too, rather than silently dropped.
    refused = [k for k, verdict in verdicts.items() if k in spec.model_fields_set and verdict in (NOT_EXPORTED, None)]
    for key in refused:
        if key == "hosts":
            if not spec.hosts:
                continue
            msg = (f"{engine} places every task on a node it picks; pinning tasks to hosts cannot be "
                   "expressed; export a spec without hosts (and without tasks.*.hosts)")
        elif key == "tpu" or spec.strategy == "tpu":
            continue  # reported once, below
        elif verdicts[key] is None:
            msg = (f"tfcluster export does not know what {engine} should do with {key}: (the spec model declares "
                   f"no export verdict for it); export a spec without {key}:")
        else:
            msg = (f"options of a backend tfcluster runs itself (setup commands, file sync, hosts); {engine} "
                   f"cannot express them; bake what they do into the image and export a spec without {key}:")
        problems.append(where((key,), msg))
    if spec.strategy == "tpu":
        problems.append(where(("strategy",), f"tpu: export writes CPU/GPU clusters; {engine} with TPUs needs "
                              "TPU machine settings tfcluster does not generate; use a GPU or CPU strategy"))
    for task_type in TASK_TYPES:
        group = spec.tasks.group(task_type)
        if group.ports is not None:
            problems.append(where(("tasks", task_type, "ports"), f"{engine} gives every replica its own address "
                                  "and assigns the port layout itself; remove the per-task ports"))
    restart = spec.restart
    if restart.warm_standby is True:  # auto (the default) is simply off there
        problems.append(where(("restart", "warm_standby"), "pre-started standby processes are a feature of "
                              f"tfcluster's own supervisor (every backend); {engine} cannot express them; "
                              "set it to false or auto"))
    if target == "tfjob" and restart.max_restarts and restart.permanent_exit_codes not in (DEFAULT_PERMANENT, ()):
        problems.append(where(("restart", "permanent_exit_codes"), "a TFJob's ExitCode policy fixes 1-127 as "
                              "permanent and 128-255 as retried; drop the key (that default) or set [] (retry "
                              "every failure: OnFailure)"))
    state = spec.state
    if state.dir is not None and not state.is_url:
        problems.append(where(("state", "dir"), f"'{state.dir}' is a path on the ssh hosts; the replicas of "
                              f"{engine} cannot see it; use a gs:// URL or remove it"))
    if "sync" in state.model_fields_set and state.sync == "copy":
        problems.append(where(("state", "sync"), f"copy is done by tfcluster between ssh hosts; {engine} has "
                              "no tfcluster to copy state; use a gs:// state.dir (shared)"))
    gpus = spec.devices.gpus
    if isinstance(gpus, tuple):
        problems.append(where(("devices", "gpus"), f"{list(gpus)} picks GPUs of a host by index; a replica of "
                              f"{engine} sees only the GPUs it was given; use a count or all"))
    docker = spec.docker
    if docker.volumes:
        problems.append(where(("docker", "volumes"), f"bind mounts of this machine's paths; {engine} cannot mount "
                              "them; put the data in the image or in Cloud Storage"))
    if docker.user:
        problems.append(where(("docker", "user"), f"{engine} runs the image's own user; set USER in the image "
                              "and remove docker.user"))
    return sorted(problems, key=where.line)


def check_image(image: Optional[str]) -> None:
    if image is not None and not IMAGE_RE.fullmatch(image):
        raise SpecError(f"--image: '{image}' is not a valid image reference; use e.g. "
                        "us-docker.pkg.dev/my-project/repo/tfcluster-worker:1")


def export_plan(spec: Spec) -> Plan:
    """Task list, command and environment as tfcluster would run them (one container per task,
    each its own host: the engine's replicas get their GPUs and threads where they run, not from
    this machine)."""
    slots = containergpus.placement(spec).slots
    return build_plan(spec.model_copy(update={"backend": compose_kind().name}), Placement(slots))


def state_dir(spec: Spec) -> str:
    """TFCLUSTER_STATE_DIR in the replicas: a gs:// state.dir, else the image's own state dir."""
    return spec.state.dir if spec.state.is_url else STATE_DIR


def type_gpus(spec: Spec, task_type: str) -> Optional[int]:
    """GPUs each replica of ``task_type`` gets by the spec: its group's ``gpus``, else
    ``devices.gpus_per_task`` N for a GPU role (0 for the ps and the parameter_server chief);
    ``auto``/``all`` with a ``devices.gpus`` count: that count (the replica is alone on its
    machine). None: the spec does not say (``auto``/``all`` on any machine, or its env sets
    CUDA_VISIBLE_DEVICES): the export's own resource keys decide."""
    if gpus.placement_off(spec):
        return None
    take, _ = gpus.take_of(spec, task_type)
    if isinstance(take, int):
        return take
    count = spec.devices.gpus
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def type_env(spec: Spec, task_type: str) -> list[tuple[str, str]]:
    """What a replica type's container gets beyond ``container_env``: -1 for a type without GPUs."""
    if type_gpus(spec, task_type) == 0 and gpuplace.CUDA_VAR not in spec.env:
        return [(gpuplace.CUDA_VAR, "-1")]
    return []


def container_env(spec: Spec, plan: Plan) -> dict[str, str]:
    """The environment every replica gets: tfcluster's own, minus what the engine sets per replica."""
    # (TFCLUSTER_KERAS: tfcluster's stub makes `import keras` tf_keras; an engine's pod has no stub)
    drop = set(PER_TASK_ENV) | {k for k in GPU_ENV if k not in spec.env} | {envnames.KERAS}
    env = {k: v for k, v in plan.tasks[0].env if k not in drop} if plan.tasks else {}
    mem = spec.devices.gpu_memory
    if mem == "growth" and gpuplace.GROWTH_VAR not in spec.env:
        env[gpuplace.GROWTH_VAR] = "true"
    elif isinstance(mem, int) and envnames.GPU_MEMORY not in spec.env:
        env[envnames.GPU_MEMORY] = str(mem)
    env[envnames.STATE_DIR] = state_dir(spec)
    env[envnames.RUN_ID] = "export"
    env[envnames.RESTART_COUNT] = "0"
    return dict(sorted(env.items()))


def comment_lines(text: str) -> list[str]:
    return ["# " + comment_text(line) if line else "#" for line in text.splitlines()]


class FlowList(list):
    """A list the export's YAML writes on one line (a long list of exit codes)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def dump_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)


def default_output(loaded: LoadedSpec, suffix: str) -> Path:
    return loaded.base_dir / f"{loaded.spec.name}.{suffix}"
