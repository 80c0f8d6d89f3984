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
standby.py (warm standby: the standby's promotion). The two seams, ``DockerHosts`` (the
engine: the probe, ``down``) and ``DockerTasks`` (the containers), share one ``DockerRun``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping, Optional

from launcher.contract import envnames
from launcher.plan import containergpus as gpus
from launcher.plan.hostreport import HostReport, SharedMachine
from launcher.bounded import one_line
from launcher.notices import Notices, PlainNotices
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask
from launcher.spec.model import LoadedSpec, Spec
from launcher.backends.base import (Backend, BackendKind, Capabilities, Hosts, OutputSink, RecordedRun, StartRequest, Tasks,
                                    accepts)
from launcher.backends.standbyfile import mem_available
from launcher.backends.docker import containers, images, standby, volumes
from launcher.backends.docker.containers import DockerTask, engine_cpus
from launcher.backends.docker.engine import Engine, connect, docker, engine_of, engine_url, requests
from launcher.backends.docker.options import DockerOptions


class DockerBackend(BackendKind):
    name = "docker"
    options_key = "docker"
    options_exported = True
    Options = DockerOptions
    # Every container has its own network namespace: task ports cannot clash, nothing to preflight.
    # Warm standby: a container per standby, given the task's DNS name when promoted (standby.py).
    capabilities = Capabilities(warm_standby=True, port_probe=True, stacks=True)
    plans_compose = True

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A container per task, named (and dialled) like the task: ``worker-0``, all on the
        engine's host (this machine): its cores (the threads' budgets) and, where they hold the
        GPU tasks, its GPUs are in the plan, which is what each container runs with."""
        return gpus.with_engine_gpus(spec, cores=os.cpu_count())

    @classmethod
    def from_spec(cls, loaded: LoadedSpec, record: Any = None, console: Optional[Notices] = None) -> Backend:
        run = DockerRun(loaded, record, console)
        return Backend(cls, DockerHosts(run), DockerTasks(run))


class DockerRun:
    """What both seams of a docker run share: the engine and its client (connected on first
    use), the run's names, and what the probe found for the tasks (the uid and gid the
    containers run as)."""

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
        self.ids: Optional[tuple[int, int]] = None  # the containers' (uid, gid) where not root's (probe)
        self.init = False  # the image wants docker's init (read when the tasks' side is prepared)

    @property
    def client(self) -> Any:
        if self._client is None:
            tasks = sum(self.spec.tasks.count(t) for t in ("chief", "worker", "ps", "evaluator"))
            # Two streams per container (its logs, its exit), a standby beside each task.
            self._client = connect(self.engine, pool=max(10, 4 * tasks + 4))
        return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None

    def use_engine(self, url: str) -> None:
        """The engine a recorded run used (``down``), where it is another unix socket."""
        self.engine = Engine(url=url)
        self.url = url

    def container_name(self, task: PlannedTask) -> str:
        return f"{self.prefix}-{task.slug}"

    def host_config(self, task: PlannedTask, binds: Optional[dict] = None) -> dict:
        """The HostConfig of a task's container: its mounts, its GPUs (a device request for
        the engine host's GPUs the plan gave it) and its /dev/shm."""
        return containers.host_config(self.client, binds, gpus.container(task, self.opts.shm_size), self.init)

    def disconnect(self) -> None:
        if self._client is None:
            return
        try:
            self._client.close()
        except Exception:  # noqa: BLE001
            pass
        self._client = None


class DockerHosts(Hosts):
    """The engine (on this machine): the image, the names and the GPUs probed before the run;
    its memory; what a recorded run left on it."""

    def __init__(self, run: DockerRun) -> None:
        self.run = run

    def probe(self, plan: Plan) -> HostReport:
        """The mounts, the image, who the containers run as, the engine host's cores and GPUs (a
        GPU container asked for once), the names: refused in one line each; what it found of the
        engine's host reported (the plan for its cores and GPUs is launcher/plan/preflight.py's)."""
        run = self.run
        client = run.client
        volumes.check(run.opts.volumes, run.loaded.base_dir)
        images.ensure(client, run.opts, run.loaded.base_dir, run.url, run.console)
        self._container_owner(client)
        found = self._gpus(plan)
        machine = SharedMachine(gpus.HOST, engine_cpus(client), found, gpus.launcher_limit().get(gpus.HOST))
        if run.prefix:
            self._names_free(plan)
        return HostReport(shared=machine)

    def _names_free(self, plan: Plan) -> None:
        run, client = self.run, self.run.client
        for task in plan.tasks:
            name = run.container_name(task)
            try:
                client.api.inspect_container(name)
            except docker.errors.NotFound:
                continue
            raise LaunchError(f"container name {name} is taken (task {task.key}); remove it: docker rm -f {name}")
        if client.api.networks(names=[run.network_name]):
            raise LaunchError(
                f"network name {run.network_name} is taken; remove it: docker network rm {run.network_name}"
            )

    def _container_owner(self, client) -> None:
        """Who the tasks' containers run as, by number (a name looked up in the image: one line
        if it is not there), before anything starts; as root, the record's dirs are given to that
        uid, and a run trusts them as its own (launcher/record/writer.py, ``trust_owner``)."""
        if os.geteuid() != 0:
            return
        run = self.run
        user = run.opts.user or images.config(client, run.opts.image).user
        labels = containers.labels(run.run_id or "preflight", run.spec.name)
        run.ids = volumes.container_ids(user, lambda: volumes.image_files(client, run.opts.image, labels))
        if run.ids is not None and run.record is not None:
            run.record.trust_owner(run.ids[0])

    def _gpus(self, plan: Plan) -> Optional[tuple]:
        """The engine host's GPUs (nvidia-smi -L here: the engine runs on this machine) where a
        task uses one (None: none does). Where the plan gives them as they are, said, and one
        probe container asks the engine for the first GPU task's (created, started, removed),
        so an engine without a GPU runtime is one line before any task starts."""
        run = self.run
        found = gpus.engine_gpus(run.spec)
        if found is None or gpus.refused(run.spec, found, gpus.launcher_limit().get(gpus.HOST)):
            return found  # (refused in one line by the plan it gives)
        run.console.info(gpus.describe(plan.tasks, found))
        first = next((t for t in plan.tasks if gpus.device_ids(t.gpus)), None)
        if first is not None:
            containers.probe_gpu_runtime(run.client, run.opts.image, run.host_config(first),
                                         containers.labels(run.run_id or "preflight", run.spec.name), run.url,
                                         gpus.device_ids(first.gpus))
        return found

    def allocate(self, spec: Spec) -> Placement:
        return DockerBackend.place(spec)

    def free_memory(self, hosts) -> dict[str, int]:
        """Every container shares the engine's machine (this one): an equal share of its
        MemAvailable per task host."""
        free = mem_available()
        return {h: free // max(len(hosts), 1) for h in hosts} if free is not None else {}

    def down(self, run: RecordedRun, console: Notices) -> bool:
        """Remove what the run left behind: its containers and network, by id, each only once its
        labels prove it this run's (containers.not_own); a container the record names that is
        not gets one line and stays."""
        run_id, name = run.run_id, self.run.spec.name
        tasks = run.tasks
        urls = {t.get("engine") for t in tasks.values() if t.get("engine")}
        if urls:
            # The engine the run used; a unix socket needs no TLS settings from the environment.
            recorded = urls.pop()
            if recorded != self.run.url and recorded.startswith("unix://"):
                self.run.use_engine(recorded)
        client = self.run.client
        removed: list[str] = []
        ids: dict[str, str] = {}
        for key, t in tasks.items():
            cid = t.get("container_id")
            if not isinstance(cid, str) or not cid:
                continue
            shown_name = one_line(str(t.get("container") or cid[:12]), 80)
            try:
                found = (client.api.inspect_container(cid).get("Config") or {}).get("Labels")
            except docker.errors.NotFound:
                continue
            why = containers.not_own(found, run_id, name)
            if why is not None:
                run.refuse(console, f"{key}: not removing container {shown_name}, which run {run_id}'s record names: "
                                    f"{why}")
                continue
            ids[cid] = shown_name
        for c in client.api.containers(all=True, filters={"label": f"{containers.LABEL_RUN}={run_id}"}):
            if containers.not_own(c.get("Labels"), run_id, name) is None:
                ids.setdefault(c["Id"], (c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        for cid, shown_name in ids.items():
            if containers.remove(client, cid, grace=self.run.spec.watchdog.stop_grace):
                removed.append(shown_name)
        for net in client.api.networks(filters={"label": f"{containers.LABEL_RUN}={run_id}"}):
            if containers.not_own(net.get("Labels"), run_id, name) is not None:
                continue
            try:
                client.api.remove_network(net["Id"])
                removed.append(f"network {net['Name']}")
            except docker.errors.NotFound:
                pass
        if removed:
            console.info(f"removed {', '.join(removed)}")
        return bool(removed)

    def close(self) -> None:
        self.run.disconnect()


class DockerTasks(Tasks):
    """A container per task on the run's network: created, promoted (a standby's container
    given the task's DNS name), probed; every one removed by id at the end."""

    def __init__(self, run: DockerRun) -> None:
        self.run = run
        self._network_id: Optional[str] = None
        self._handles: dict[str, DockerTask] = {}
        self._created: list[str] = []  # container ids, in creation order
        self._lifelines: list[Any] = []
        self._wrapper: list[str] = []
        self._channel = False  # the image's wrapper takes --control (images.ImageConfig.channel)
        self._user: Optional[str] = None
        self._owner: Optional[tuple[int, int]] = None  # the containers' uid, gid (promotion files)
        self._standbys = 0
        self._prepared = False
        self._lock = threading.Lock()

    def _prepare(self) -> None:
        """Once per run: the network, the user tasks run as, writable mounts."""
        if self._prepared:
            return
        run = self.run
        if run.record is None or not run.prefix:
            raise LaunchError("internal: the docker backend needs a run record to start tasks")
        client = run.client
        net = client.api.create_network(
            run.network_name, driver="bridge", check_duplicate=True,
            labels=containers.labels(run.run_id, run.spec.name),
        )
        self._network_id = net["Id"]
        image = images.config(client, run.opts.image)
        run.init = image.init
        self._wrapper = image.wrapper
        self._channel = image.channel
        self._user = volumes.prepare_owner(run.record, run.opts.user, run.ids)
        self._owner = run.ids or standby.owner(self._user, image.user)  # (a name: its uid, from the image)
        self._prepared = True

    def start(self, request: StartRequest, on_line: OutputSink) -> DockerTask:
        task = request.task
        try:
            return self._start(request, on_line)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if isinstance(exc, docker.errors.APIError):
                raise LaunchError(f"{task.key}: the Docker engine at {self.run.url} refused: "
                                  f"{(exc.explanation or str(exc)).splitlines()[0]}") from None
            raise LaunchError(f"{task.key}: lost the Docker engine at {self.run.url}: is dockerd running? "
                              f"(tfcluster down removes what is left once it is back)") from None

    def _environment(self, task: PlannedTask, env: Mapping[str, str]) -> dict[str, str]:
        """What a task's container gets besides the image's environment: the plan's env as it
        is (its GPUs and threads included), where the record is mounted, the attempt's own."""
        environment = dict(task.env)
        environment.update({envnames.RUN_DIR: volumes.RUN_MOUNT, envnames.STATE_DIR: volumes.STATE_MOUNT})
        environment.update(env)
        if self._user and not self.run.opts.user:
            environment.setdefault("HOME", "/tmp")
        return environment

    def _start(self, request: StartRequest, on_line: OutputSink) -> DockerTask:
        run, task = self.run, request.task
        is_standby = request.standby
        with self._lock:
            self._prepare()
            client = run.client
            name = run.container_name(task)
            promotion = inside = None
            if is_standby:  # a container of its own, without the task's DNS name (standby.py)
                self._standbys += 1
                name = f"{name}-standby-{self._standbys}"
                if self._owner is not None:
                    promotion, inside = standby.promotion_paths(run.record.dir, task.slug, self._standbys)
            else:
                old = self._handles.pop(task.key, None)
                if old is not None:  # the previous attempt's container: free its name and address
                    containers.close_quietly(old.lifeline)
                    containers.remove(client, old.id)
            environment = self._environment(task, request.told(inside))
            binds = volumes.binds(run.record, run.opts.volumes, run.loaded.base_dir)
            host_config = run.host_config(task, binds)
            networking = client.api.create_networking_config(
                {run.network_name: client.api.create_endpoint_config(aliases=None if is_standby else [task.address])}
            )
            label = containers.labels(run.run_id, run.spec.name, task.key)
            if is_standby:
                label[standby.LABEL_STANDBY] = "1"
            command = list(task.command)
            if self._wrapper:
                control = ["--control", envnames.CONTROL_FD] if self._channel else []
                command = [*self._wrapper, "--grace", f"{run.spec.watchdog.stop_grace:g}", *control, "--", *command]
            cid, lifeline = containers.create_and_start(
                client, run.opts.image, task, name, command, environment, self._user, host_config, networking,
                label, bool(self._wrapper), self._created, on_line)
            handle = DockerTask(task, run, cid, name, on_line, framed=self._channel)
            handle.lifeline = lifeline
            handle.promotion = promotion
            if not is_standby:
                self._handles[task.key] = handle
            self._lifelines.append(lifeline)
            return handle

    def promote(self, handle, request: StartRequest) -> None:
        """A standby container becomes the task of the cold start ``request``
        (launcher/backends/docker/standby.py). Failing, it is removed (it may hold the task's name
        by now) and the task starts cold."""
        task = request.task
        try:
            with self._lock:
                standby.promote(self.run.client, self._handles, self._network_id, handle,
                                self.run.container_name(task), self._owner, task,
                                self._environment(task, request.told()))
            return
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            what = (exc.explanation or str(exc)) if isinstance(exc, docker.errors.APIError) else str(exc)
            problem = (f"the Docker engine at {self.run.url} refused the promotion: "
                       f"{(what or exc.__class__.__name__).splitlines()[0][:200]}")
        except OSError as exc:
            problem = f"cannot write its promotion file: {exc}"
        try:
            containers.remove(self.run.client, handle.id)
        except Exception:  # noqa: BLE001 - the engine is gone: close() and tfcluster down say so
            pass
        raise LaunchError(problem)  # the supervisor names the task

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
        run = self.run
        if not run.connected:
            return
        client = run.client
        for sock in self._lifelines:
            containers.close_quietly(sock)
        self._lifelines.clear()
        left = []
        for cid in reversed(self._created):
            try:
                containers.remove(client, cid)
            except Exception:  # noqa: BLE001 - engine gone or refusing: say what is left
                left.append(cid[:12])
        self._created.clear()
        if left:
            run.console.error(f"could not remove container(s) {', '.join(left)} from the engine at {run.url}; "
                              "run tfcluster down once the engine answers")
        self._handles.clear()
        if self._network_id:
            try:
                client.api.remove_network(self._network_id)
            except docker.errors.NotFound:
                pass
            except Exception:  # noqa: BLE001
                run.console.error(f"could not remove network {run.network_name} from the engine at {run.url}; "
                                  "run tfcluster down once the engine answers")
            self._network_id = None


__all__ = ["DockerBackend", "DockerHosts", "DockerRun", "DockerTask", "DockerTasks", "connect", "engine_url"]
