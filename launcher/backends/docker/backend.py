"""Docker backend: every task is a container on one private network of its run.

Everything this backend creates is named and labelled by run id
(``tfcluster-<name>-<run id>-<type>-<index>``, label ``tfcluster.run_id=<run id>``) and removed
by id when the run ends; ``tfcluster down`` finds leftovers by that exact label, never by a
name pattern that could match another run.

Containers see the run record through bind mounts: the run's directory at /tfcluster/run and
the spec's state directory (shared by every run of this name) at /tfcluster/state, so a group
restart -- and a rerun -- resumes from the BackupAndRestore backup there. The engine must
therefore run on this machine (a local socket, or a TCP engine on this host).

This module is what the backend does, in order; the parts live beside it: engine.py (the SDK,
the engine's address, a client), images.py (inspect, pull, build), volumes.py (the mounts and
their ownership), containers.py (labels, HostConfig, create/start, the task handle, removal),
standby.py (warm standby: the standby's promotion).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping, Optional

from launcher.plan import threads
from launcher.contract import envnames
from launcher.plan import containergpus as gpus
from launcher.plan import gpus as plan_gpus
from launcher.bounded import one_line
from launcher.notices import Notices, PlainNotices
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, task_keys
from launcher.spec.model import LoadedSpec, Spec
from launcher.backends.base import Backend, Capabilities, LineSink, RecordedRun, accepts
from launcher.backends.standbyfile import mem_available
from launcher.backends.docker import containers, images, standby, volumes
from launcher.backends.docker.containers import DockerTask
from launcher.backends.docker.engine import Engine, connect, docker, engine_of, engine_url, requests
from launcher.backends.docker.options import DockerOptions


class DockerBackend(Backend):
    name = "docker"
    options_key = "docker"
    options_exported = True
    Options = DockerOptions
    # Every container has its own network namespace: task ports cannot clash, nothing to preflight.
    # Warm standby: a container per standby, given the task's DNS name when promoted (standby.py).
    capabilities = Capabilities(warm_standby=True, port_probe=True, stacks=True)

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A container per task, named (and dialled) like the task: ``worker-0``; with the engine
        host's GPUs where they hold the GPU tasks (the plan then shows each container's)."""
        return gpus.with_engine_gpus(spec, Placement({f"{t}:{i}": Slot(f"{t}-{i}", f"{t}-{i}") for t, i in task_keys(spec)}))

    def __init__(self, loaded: LoadedSpec, record: Any = None, console: Optional[Notices] = None) -> None:
        self.loaded = loaded
        self.spec = loaded.spec
        self.opts = loaded.spec.docker
        self.record = record
        self.console = console or PlainNotices()
        self.engine = engine_of(loaded)
        self.url = self.engine.url
        self._client: Optional[Any] = None
        self.run_id: Optional[str] = getattr(record, "run_id", None)
        self.prefix = f"tfcluster-{self.spec.name}-{self.run_id}" if self.run_id else ""
        self.network_name = self.prefix
        self._network_id: Optional[str] = None
        self._handles: dict[str, DockerTask] = {}
        self._created: list[str] = []  # container ids, in creation order
        self._lifelines: list[Any] = []
        self._wrapper: list[str] = []
        self._user: Optional[str] = None
        self._owner: Optional[tuple[int, int]] = None  # the containers' uid, gid (promotion files)
        self._standbys = 0
        self._init = False
        self._prepared = False
        self._ids: Optional[tuple[int, int]] = None  # the containers' (uid, gid) where not root's (preflight)
        self._ncpu: Optional[int] = None
        self._containers: dict[str, gpus.Container] = {}  # task key -> its GPUs and /dev/shm (preflight)
        self._lock = threading.Lock()

    # -------------------------------------------------------------- engine

    @property
    def client(self) -> Any:
        if self._client is None:
            tasks = sum(self.spec.tasks.count(t) for t in ("chief", "worker", "ps", "evaluator"))
            # Two streams per container (its logs, its exit), a standby beside each task.
            self._client = connect(self.engine, pool=max(10, 4 * tasks + 4))
        return self._client

    def container_name(self, task: PlannedTask) -> str:
        return f"{self.prefix}-{task.slug}"

    # -------------------------------------------------------------- preflight

    def preflight(self, plan: Plan) -> None:
        client = self.client
        volumes.check(self.opts.volumes, self.loaded.base_dir)
        images.ensure(client, self.opts, self.loaded.base_dir, self.url, self.console)
        self._container_owner(client)
        self.plan_gpus(plan)
        if not self.prefix:
            return
        for task in plan.tasks:
            name = self.container_name(task)
            try:
                client.api.inspect_container(name)
            except docker.errors.NotFound:
                continue
            raise LaunchError(f"container name {name} is taken (task {task.key}); remove it: docker rm -f {name}")
        if client.api.networks(names=[self.network_name]):
            raise LaunchError(
                f"network name {self.network_name} is taken; remove it: docker network rm {self.network_name}"
            )

    def _container_owner(self, client) -> None:
        """Who the tasks' containers run as, by number (a name looked up in the image: one line
        if it is not there), before anything starts; as root, the record's dirs are given to that
        uid, and a run trusts them as its own (launcher/record/writer.py, ``trust_owner``)."""
        if os.geteuid() != 0:
            return
        user = self.opts.user or images.config(client, self.opts.image).user
        labels = containers.labels(self.run_id or "preflight", self.spec.name)
        self._ids = volumes.container_ids(user, lambda: volumes.image_files(client, self.opts.image, labels))
        if self._ids is not None and self.record is not None:
            self.record.trust_owner(self._ids[0])

    def plan_gpus(self, plan: Plan) -> None:
        """Each container's GPUs from the engine host's (nvidia-smi -L here: the engine runs on
        this machine), refused in one line when they do not suffice; with GPUs to give, one
        probe container asks the engine for them (created, started, removed), so an engine
        without a GPU runtime is one line before any task starts."""
        asked = gpus.asked(self.spec)
        engine_gpus = plan_gpus.local_gpus() if asked else ()
        self._containers, problems = gpus.containers(self.spec, plan.tasks, engine_gpus, self.opts.shm_size,
                                                     gpus.launcher_limit().get(gpus.HOST))
        if problems:
            raise LaunchError(f"docker: {problems[0]}")
        if not asked:
            return
        self.console.info(gpus.describe(self._containers, engine_gpus))
        first = next((c for c in self._containers.values() if c.device_ids), None)
        if first is not None:
            self._probe_gpu_runtime(first)

    def host_config(self, binds: Optional[dict] = None, container: Optional[gpus.Container] = None) -> dict:
        """The HostConfig of a task's container: its mounts, its GPUs (a device request for
        the engine host's indices) and its /dev/shm."""
        return containers.host_config(self.client, binds, container, self._init)

    def _probe_gpu_runtime(self, container: gpus.Container) -> None:
        containers.probe_gpu_runtime(self.client, self.opts.image, self.host_config(container=container),
                                     containers.labels(self.run_id or "preflight", self.spec.name), self.url,
                                     container.device_ids)

    # -------------------------------------------------------------- tasks

    def _engine_cpus(self, client) -> int:
        """The engine's CPUs (``docker info``'s NCPU; tfcluster sets no container CPU limit)."""
        if self._ncpu is None:
            self._ncpu = int(client.info().get("NCPU") or 1)
        return self._ncpu

    def _prepare(self) -> None:
        """Once per run: the network, the user tasks run as, writable mounts."""
        if self._prepared:
            return
        if self.record is None or not self.prefix:
            raise LaunchError("internal: the docker backend needs a run record to start tasks")
        client = self.client
        net = client.api.create_network(
            self.network_name, driver="bridge", check_duplicate=True,
            labels=containers.labels(self.run_id, self.spec.name),
        )
        self._network_id = net["Id"]
        image = images.config(client, self.opts.image)
        self._init = image.init
        self._wrapper = image.wrapper
        self._user = volumes.prepare_owner(self.record, self.opts.user, self._ids)
        self._owner = self._ids or standby.owner(self._user, image.user)  # (a name: its uid, from the image)
        self._prepared = True

    def start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> DockerTask:
        try:
            return self._start(task, env, on_line)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if isinstance(exc, docker.errors.APIError):
                raise LaunchError(f"{task.key}: the Docker engine at {self.url} refused: "
                                  f"{(exc.explanation or str(exc)).splitlines()[0]}") from None
            raise LaunchError(f"{task.key}: lost the Docker engine at {self.url}: is dockerd running? "
                              f"(tfcluster down removes what is left once it is back)") from None

    def _environment(self, task: PlannedTask, env: Mapping[str, str]) -> dict[str, str]:
        """What a task's container gets besides the image's environment."""
        container = self._containers.get(task.key)
        environment = dict(container.env if container is not None else task.env)
        environment.update({envnames.RUN_DIR: volumes.RUN_MOUNT, envnames.STATE_DIR: volumes.STATE_MOUNT})
        environment.update(env)
        if envnames.THREADS in environment:  # threads: auto: every task shares the engine's CPUs
            keys = [f"{t}:{i}" for t, i in task_keys(self.spec)]
            environment[envnames.THREADS] = f"{keys.index(task.key)}/{len(keys)}"
            environment = threads.complete(environment, self._engine_cpus(self.client), envnames.THREADS)
        if self._user and not self.opts.user:
            environment.setdefault("HOME", "/tmp")
        return environment

    def _start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> DockerTask:
        is_standby = env.get(envnames.STANDBY) == "1"
        with self._lock:
            self._prepare()
            client = self.client
            name = self.container_name(task)
            promotion = None
            if is_standby:  # a container of its own, without the task's DNS name (standby.py)
                self._standbys += 1
                name = f"{name}-standby-{self._standbys}"
                if self._owner is not None:
                    promotion, inside = standby.promotion_paths(self.record.dir, task.slug, self._standbys)
                    env = {**env, envnames.STANDBY_ENV: inside}
            else:
                old = self._handles.pop(task.key, None)
                if old is not None:  # the previous attempt's container: free its name and address
                    containers.close_quietly(old.lifeline)
                    containers.remove(client, old.id)
            container = self._containers.get(task.key)
            environment = self._environment(task, env)
            binds = volumes.binds(self.record, self.opts.volumes, self.loaded.base_dir)
            host_config = self.host_config(binds, container)
            networking = client.api.create_networking_config(
                {self.network_name: client.api.create_endpoint_config(aliases=None if is_standby else [task.address])}
            )
            label = containers.labels(self.run_id, self.spec.name, task.key)
            if is_standby:
                label[standby.LABEL_STANDBY] = "1"
            command = list(task.command)
            if self._wrapper:
                command = [*self._wrapper, "--grace", f"{self.spec.watchdog.stop_grace:g}", "--", *command]
            cid, lifeline = containers.create_and_start(
                client, self.opts.image, task, name, command, environment, self._user, host_config, networking,
                label, bool(self._wrapper), self._created, on_line)
            handle = DockerTask(task, self, cid, name, on_line)
            handle.lifeline = lifeline
            handle.promotion = promotion
            if not is_standby:
                self._handles[task.key] = handle
            self._lifelines.append(lifeline)
            return handle

    def promote(self, handle, task: PlannedTask, env: Mapping[str, str]) -> None:
        """A standby container becomes ``task`` (launcher/backends/docker/standby.py). Failing, it
        is removed (it may hold the task's name by now) and the task starts cold."""
        try:
            with self._lock:
                standby.promote(self, handle, task, self._environment(task, env))
            return
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            what = (exc.explanation or str(exc)) if isinstance(exc, docker.errors.APIError) else str(exc)
            problem = (f"the Docker engine at {self.url} refused the promotion: "
                       f"{(what or exc.__class__.__name__).splitlines()[0][:200]}")
        except OSError as exc:
            problem = f"cannot write its promotion file: {exc}"
        try:
            containers.remove(self.client, handle.id)
        except Exception:  # noqa: BLE001 - the engine is gone: close() and tfcluster down say so
            pass
        raise LaunchError(problem)  # the supervisor names the task

    def free_memory(self, hosts) -> dict[str, int]:
        """Every container shares the engine's machine (this one): an equal share of its
        MemAvailable per task host."""
        free = mem_available()
        return {h: free // max(len(hosts), 1) for h in hosts} if free is not None else {}

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        handle = self._handles.get(task.key)
        if handle is None:
            return False
        ip = handle.ip()
        if not ip:
            return False
        return accepts(ip, task.port)

    def close(self) -> None:
        """Remove every container and the network this run created (by id)."""
        if self._client is None:
            return
        for sock in self._lifelines:
            containers.close_quietly(sock)
        self._lifelines.clear()
        left = []
        for cid in reversed(self._created):
            try:
                containers.remove(self._client, cid)
            except Exception:  # noqa: BLE001 - engine gone or refusing: say what is left
                left.append(cid[:12])
        self._created.clear()
        if left:
            self.console.error(f"could not remove container(s) {', '.join(left)} from the engine at {self.url}; "
                               "run tfcluster down once the engine answers")
        self._handles.clear()
        if self._network_id:
            try:
                self._client.api.remove_network(self._network_id)
            except docker.errors.NotFound:
                pass
            except Exception:  # noqa: BLE001
                self.console.error(f"could not remove network {self.network_name} from the engine at {self.url}; "
                                   "run tfcluster down once the engine answers")
            self._network_id = None
        try:
            self._client.close()
        except Exception:  # noqa: BLE001
            pass
        self._client = None

    # -------------------------------------------------------------- tfcluster down

    def down(self, run: RecordedRun, console: Notices) -> bool:
        """Remove what the run left behind: its containers and network, by id, each only once its
        labels prove it this run's (containers.not_own); a container the record names that is
        not gets one line and stays."""
        run_id = run.run_id
        tasks = run.tasks
        urls = {t.get("engine") for t in tasks.values() if t.get("engine")}
        if urls:
            # The engine the run used; a unix socket needs no TLS settings from the environment.
            recorded = urls.pop()
            if recorded != self.url and recorded.startswith("unix://"):
                self.engine = Engine(url=recorded)
                self.url = recorded
        client = self.client
        removed: list[str] = []
        ids: dict[str, str] = {}
        for key, t in tasks.items():
            cid = t.get("container_id")
            if not isinstance(cid, str) or not cid:
                continue
            name = one_line(str(t.get("container") or cid[:12]), 80)
            try:
                found = (client.api.inspect_container(cid).get("Config") or {}).get("Labels")
            except docker.errors.NotFound:
                continue
            why = containers.not_own(found, run_id, self.spec.name)
            if why is not None:
                run.refuse(console, f"{key}: not removing container {name}, which run {run_id}'s record names: "
                                    f"{why}")
                continue
            ids[cid] = name
        for c in client.api.containers(all=True, filters={"label": f"{containers.LABEL_RUN}={run_id}"}):
            if containers.not_own(c.get("Labels"), run_id, self.spec.name) is None:
                ids.setdefault(c["Id"], (c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        for cid, name in ids.items():
            if containers.remove(client, cid, grace=self.spec.watchdog.stop_grace):
                removed.append(name)
        nets = client.api.networks(filters={"label": f"{containers.LABEL_RUN}={run_id}"})
        for net in nets:
            if containers.not_own(net.get("Labels"), run_id, self.spec.name) is not None:
                continue
            try:
                client.api.remove_network(net["Id"])
                removed.append(f"network {net['Name']}")
            except docker.errors.NotFound:
                pass
        if removed:
            console.info(f"removed {', '.join(removed)}")
        self.close()
        return bool(removed)


__all__ = ["DockerBackend", "DockerTask", "connect", "engine_url"]
