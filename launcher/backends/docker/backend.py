"""Docker backend: every task is a container on one private network of its run.

Everything this backend creates is named and labelled by run id
(``tfcluster-<name>-<run id>-<type>-<index>``, label ``tfcluster.run_id=<run id>``) and removed
by id when the run ends; ``tfcluster down`` finds leftovers by that exact label, never by a
name pattern that could match another run.

Containers see the run record through bind mounts: the run's directory at /tfcluster/run and
the spec's state directory (shared by every run of this name) at /tfcluster/state, so a group
restart -- and a rerun -- resumes from the BackupAndRestore backup there. The engine must
therefore run on this machine (a local socket, or a TCP engine on this host).
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from launcher.plan import threads
from launcher.contract import envnames
from launcher.plan import containergpus as gpus
from launcher.plan import gpus as plan_gpus
from launcher.ui.console import Console
from launcher.errors import LaunchError
from launcher.plan.build import Placement, Plan, PlannedTask, Slot, task_keys
from launcher.spec.model import LoadedSpec, Spec
from launcher.backends.base import Backend, Capabilities, LineSink, RecordedRun, TaskHandle
from launcher.backends.docker.options import DockerOptions


class _LazyModule:
    """The SDK is a dependency of tfcluster, but only this backend needs it, and importing it
    costs most of a second: it is imported on first use, not when the spec is validated."""

    def __init__(self, *names: str) -> None:
        self._names = names
        self._module: Any = None

    def available(self) -> bool:
        try:
            self._load()
            return True
        except ImportError:
            return False

    def _load(self) -> Any:
        if self._module is None:
            import importlib

            for name in self._names:
                importlib.import_module(name)
            self._module = importlib.import_module(self._names[0])
        return self._module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)


docker: Any = _LazyModule("docker", "docker.errors")
requests: Any = _LazyModule("requests", "requests.exceptions")

STATE_MOUNT = "/tfcluster/state"
RUN_MOUNT = "/tfcluster/run"
LABEL_RUN = "tfcluster.run_id"
LABEL_NAME = "tfcluster.name"
LABEL_TASK = "tfcluster.task"
# On the image: the command that runs a task under a stdin lifeline (docker/Dockerfile sets it).
LABEL_LIFELINE = "tfcluster.lifeline"
DEFAULT_ENGINE = "unix:///var/run/docker.sock"
_BUILD_TIMEOUT = 3600
_API_TIMEOUT = 60


def engine_url(loaded: LoadedSpec) -> str:
    return loaded.spec.docker.engine or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE


def connect(url: str, explicit: bool, pool: int = 10) -> "docker.DockerClient":
    """A client for the engine at ``url``, pinged; LaunchError naming the fix if unreachable."""
    if not docker.available():
        raise LaunchError("backend docker needs the Python package 'docker' (not installed); "
                          "install it with: pip install 'tfcluster[docker]'")
    try:
        if explicit:
            client = docker.DockerClient(base_url=url, timeout=_API_TIMEOUT, max_pool_size=pool)
        else:  # honours DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH
            client = docker.from_env(timeout=_API_TIMEOUT, max_pool_size=pool)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - every way of failing to connect ends here
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            raise LaunchError(
                f"permission denied on the Docker engine at {url}; add your user to the docker group or run as root"
            ) from None
        raise LaunchError(
            f"cannot reach the Docker engine at {url}: is dockerd running? "
            "(start it, or point docker.engine / DOCKER_HOST at a running engine)"
        ) from None


class DockerTask(TaskHandle):
    def __init__(self, task: PlannedTask, backend: "DockerBackend", container_id: str, name: str,
                 on_line: LineSink) -> None:
        super().__init__(task)
        self.backend = backend
        self.api = backend.client.api
        self.id = container_id
        self.name = name
        self._exit: Optional[int] = None
        self._lost = ""
        self._drained = False
        self._ip: Optional[str] = None
        self.lifeline: Any = None  # the attached stdin socket; closing it stops the task
        self._logs = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"logs-{task.key}")
        self._waiter = threading.Thread(target=self._wait, daemon=True, name=f"wait-{task.key}")
        self._logs.start()
        self._waiter.start()

    # -------------------------------------------------------------- threads

    def _pump(self, on_line: LineSink) -> None:
        buf = b""
        try:
            for chunk in self.api.logs(self.id, stream=True, follow=True, stdout=True, stderr=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    on_line(self.key, line.decode("utf-8", "replace").rstrip("\r"))
        except Exception:  # noqa: BLE001 - the engine went away or the container was removed
            pass
        if buf:
            on_line(self.key, buf.decode("utf-8", "replace").rstrip("\r"))

    def _wait(self) -> None:
        failures = 0
        while True:
            try:
                result = self.api.wait(self.id, timeout=None)
                self._exit = int(result.get("StatusCode", 255))
                return
            except docker.errors.NotFound:
                self._lost = "the container was removed behind tfcluster's back"
                self._exit = 137
                return
            except Exception:  # noqa: BLE001 - connection reset, engine restarting
                failures += 1
                if failures >= 5:
                    self._lost = f"lost contact with the Docker engine at {self.backend.url}"
                    self._exit = 255
                    return
                time.sleep(1.0)

    # -------------------------------------------------------------- TaskHandle

    def poll(self) -> Optional[int]:
        if self._exit is None:
            return None
        if not self._drained:
            self._drained = True
            self._logs.join(timeout=2.0)  # let the last lines arrive first
        return self._exit

    def signal(self, sig: int) -> None:
        if self._exit is not None:
            return
        try:
            self.api.kill(self.id, signal=int(sig))
        except Exception:  # noqa: BLE001 - already stopped (409), removed (404), engine gone
            pass

    def info(self) -> dict:
        return {"container": self.name, "container_id": self.id, "network": self.backend.network_name,
                "engine": self.backend.url}

    def state_note(self) -> str:
        if self._lost:
            return self._lost
        try:
            state = self.api.inspect_container(self.id)["State"]
        except Exception:  # noqa: BLE001
            return ""
        if state.get("Paused"):
            return "container is paused (docker pause?)"
        return ""

    def ip(self) -> Optional[str]:
        if self._ip is None:
            try:
                nets = self.api.inspect_container(self.id)["NetworkSettings"]["Networks"]
                self._ip = (nets.get(self.backend.network_name) or {}).get("IPAddress") or None
            except Exception:  # noqa: BLE001
                return None
        return self._ip


class DockerBackend(Backend):
    name = "docker"
    options_key = "docker"
    options_exported = True
    Options = DockerOptions
    # Every container has its own network namespace: task ports cannot clash, nothing to preflight.
    capabilities = Capabilities(port_probe=True)

    @classmethod
    def place(cls, spec: Spec) -> Placement:
        """A container per task, named (and dialled) like the task: ``worker-0``; with the engine
        host's GPUs where they hold the GPU tasks (the plan then shows each container's)."""
        return gpus.with_engine_gpus(spec, Placement({f"{t}:{i}": Slot(f"{t}-{i}", f"{t}-{i}") for t, i in task_keys(spec)}))

    def __init__(self, loaded: LoadedSpec, record: Any = None, console: Optional[Console] = None) -> None:
        self.loaded = loaded
        self.spec = loaded.spec
        self.opts = loaded.spec.docker
        self.record = record
        self.console = console or Console()
        self.url = engine_url(loaded)
        self._explicit = bool(self.opts.engine)
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
        self._init = False
        self._prepared = False
        self._ncpu: Optional[int] = None
        self._containers: dict[str, gpus.Container] = {}  # task key -> its GPUs and /dev/shm (preflight)
        self._lock = threading.Lock()

    # -------------------------------------------------------------- engine

    @property
    def client(self) -> Any:
        if self._client is None:
            tasks = sum(self.spec.tasks.count(t) for t in ("chief", "worker", "ps", "evaluator"))
            self._client = connect(self.url, self._explicit, pool=max(10, 2 * tasks + 4))
        return self._client

    def container_name(self, task: PlannedTask) -> str:
        return f"{self.prefix}-{task.slug}"

    # -------------------------------------------------------------- preflight

    def preflight(self, plan: Plan) -> None:
        client = self.client
        self._check_volumes()
        self._ensure_image()
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

    def plan_gpus(self, plan: Plan) -> None:
        """Each container's GPUs from the engine host's (nvidia-smi -L here: the engine runs on
        this machine), refused in one line when they do not suffice; with GPUs to give, one
        probe container asks the engine for them (created, started, removed), so an engine
        without a GPU runtime is one line before any task starts."""
        asked = gpus.asked(self.spec)
        engine_gpus = plan_gpus.local_gpus() if asked else ()
        self._containers, problems = gpus.containers(self.spec, plan.tasks, engine_gpus, self.opts.shm_size)
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
        c = container or gpus.Container({})
        requests = [docker.types.DeviceRequest(device_ids=[str(i) for i in c.device_ids], capabilities=[["gpu"]])
                    ] if c.device_ids else None
        return self.client.api.create_host_config(binds=binds, init=self._init or None, auto_remove=False,
                                                  device_requests=requests, shm_size=c.shm_size)

    def _probe_gpu_runtime(self, container: gpus.Container) -> None:
        client = self.client
        cid = None
        try:
            cid = client.api.create_container(
                self.opts.image, command=["true"], entrypoint=[], host_config=self.host_config(container=container),
                labels={LABEL_RUN: self.run_id or "preflight", LABEL_NAME: self.spec.name},
            )["Id"]
            client.api.start(cid)
        except docker.errors.APIError as exc:
            problem = gpus.runtime_problem(self.url, exc.explanation or str(exc))
            if problem:
                raise LaunchError(problem) from None
            raise LaunchError(f"docker: the engine at {self.url} refused a container with GPUs "
                              f"{list(container.device_ids)}: {(exc.explanation or str(exc)).splitlines()[0][:200]}"
                              ) from None
        finally:
            if cid is not None:
                _remove(client, cid)

    def _check_volumes(self) -> None:
        for item in self.opts.volumes:
            host = self._host_path(item.split(":", 1)[0])
            if not host.exists():
                raise LaunchError(f"docker.volumes: host path {host} does not exist; create it or fix '{item}'")

    def _host_path(self, raw: str) -> Path:
        path = Path(raw).expanduser()
        return path if path.is_absolute() else (self.loaded.base_dir / path).resolve()

    def _ensure_image(self) -> None:
        image = self.opts.image
        build = self.opts.build
        present = True
        try:
            self.client.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            present = False
        if present and (build is None or build.when == "missing"):
            return
        if build is not None:
            self.build_image()
            return
        fix = f"build it (docker build -f docker/Dockerfile -t {image} .) or add docker.build to the spec"
        if self.opts.pull == "never":
            raise LaunchError(
                f"docker.image: image '{image}' is not on the Docker engine at {self.url} and docker.pull is never; {fix}"
            )
        self.pull_image(fix)

    def pull_image(self, fix: str) -> None:
        image = self.opts.image
        self.console.info(f"pulling image {image}")
        error = ""
        try:
            for chunk in self.client.api.pull(image, stream=True, decode=True):
                if "error" in chunk:
                    error = str(chunk["error"])
        except docker.errors.APIError as exc:
            error = exc.explanation or str(exc)
        except requests.exceptions.RequestException as exc:
            error = f"lost the engine during the pull ({exc.__class__.__name__})"
        if error:
            reason = error.strip().splitlines()[0][:200]
            raise LaunchError(
                f"docker.image: image '{image}' is not on the Docker engine at {self.url} and pulling it failed "
                f"({reason}); {fix}, or check the name and registry login"
            )

    def build_image(self) -> None:
        build = self.opts.build
        assert build is not None
        image = self.opts.image
        context = (self.loaded.base_dir / build.context).resolve()
        if not context.is_dir():
            raise LaunchError(f"docker.build.context: {context} is not a directory; fix the path (relative to the spec)")
        dockerfile = context / build.dockerfile
        if not dockerfile.is_file():
            raise LaunchError(
                f"docker.build.dockerfile: {dockerfile} not found; give its path relative to the build context"
            )
        args = dict(build.args)
        if build.base_image:
            args["BASE_IMAGE"] = build.base_image
        self.console.info(f"building image {image} from {dockerfile} (context {context})")
        started = time.monotonic()
        tail: list[str] = []
        error = ""
        try:
            stream = self.client.api.build(
                path=str(context), dockerfile=build.dockerfile, tag=image, buildargs=args or None,
                network_mode=build.network, rm=True, forcerm=True, decode=True, timeout=_BUILD_TIMEOUT,
            )
            for chunk in stream:
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                text = chunk.get("stream")
                if text:
                    for line in text.rstrip("\n").splitlines():
                        tail = (tail + [line])[-20:]
                        if line.startswith("Step ") or line.startswith("Successfully"):
                            self.console.info(f"build: {line}")
        except docker.errors.APIError as exc:
            error = exc.explanation or str(exc)
        except requests.exceptions.RequestException as exc:
            error = f"lost the engine during the build ({exc.__class__.__name__})"
        if error:
            if tail:
                self.console.block([f"  | {line}" for line in tail])
            first = error.splitlines()[0][:300]
            raise LaunchError(
                f"docker.build: building image '{image}' failed: {first}; fix the Dockerfile, docker.build.args "
                "or the network the build needs (docker.build.network)"
            )
        self.console.info(f"built image {image} in {time.monotonic() - started:.0f} s")

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
            labels={LABEL_RUN: self.run_id, LABEL_NAME: self.spec.name},
        )
        self._network_id = net["Id"]
        config = client.api.inspect_image(self.opts.image)["Config"] or {}
        self._init = not config.get("Entrypoint")  # the image has no init (tini) of its own
        wrapper = (config.get("Labels") or {}).get(LABEL_LIFELINE, "")
        self._wrapper = shlex.split(wrapper) if wrapper else []
        image_user = config.get("User") or ""
        dirs = [Path(self.record.state_dir), Path(self.record.dir)]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        if self.opts.user:
            self._user = self.opts.user
        elif os.geteuid() != 0:
            # Files in the run record stay yours; HOME goes to /tmp below (no passwd entry).
            self._user = f"{os.getuid()}:{os.getgid()}"
        else:
            uid = image_user.split(":", 1)[0]
            if uid.isdigit() and uid != "0":
                gid = image_user.split(":", 1)[1] if ":" in image_user else uid
                _chown_tree(dirs[0], int(uid), int(gid) if gid.isdigit() else int(uid))
                os.chown(dirs[1], int(uid), int(gid) if gid.isdigit() else int(uid))
            elif image_user and image_user not in ("root", "0"):
                for d in dirs:  # a named user we cannot map to a uid from here
                    os.chmod(d, 0o1777)
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

    def _start(self, task: PlannedTask, env: Mapping[str, str], on_line: LineSink) -> DockerTask:
        with self._lock:
            self._prepare()
            client = self.client
            old = self._handles.pop(task.key, None)
            if old is not None:  # the previous attempt's container: free its name and address
                _close_quietly(old.lifeline)
                _remove(client, old.id)
            name = self.container_name(task)
            container = self._containers.get(task.key)
            environment = dict(container.env if container is not None else task.env)
            environment.update({envnames.RUN_DIR: RUN_MOUNT, envnames.STATE_DIR: STATE_MOUNT})
            environment.update(env)
            if envnames.THREADS in environment:  # threads: auto: every task shares the engine's CPUs
                keys = [f"{t}:{i}" for t, i in task_keys(self.spec)]
                environment[envnames.THREADS] = f"{keys.index(task.key)}/{len(keys)}"
                environment = threads.complete(environment, self._engine_cpus(client), envnames.THREADS)
            if self._user and not self.opts.user:
                environment.setdefault("HOME", "/tmp")
            binds = {
                str(self.record.state_dir): {"bind": STATE_MOUNT, "mode": "rw"},
                str(self.record.dir): {"bind": RUN_MOUNT, "mode": "rw"},
            }
            for item in self.opts.volumes:
                host, container_path, *mode = item.split(":")
                binds[str(self._host_path(host))] = {"bind": container_path, "mode": mode[0] if mode else "rw"}
            host_config = self.host_config(binds, container)
            networking = client.api.create_networking_config(
                {self.network_name: client.api.create_endpoint_config(aliases=[task.address])}
            )
            command = list(task.command)
            if self._wrapper:
                command = [*self._wrapper, "--grace", f"{self.spec.watchdog.stop_grace:g}", "--", *command]
            try:
                created = client.api.create_container(
                    self.opts.image, command=command, name=name, hostname=task.address,
                    # detach=False is how the SDK sets StdinOnce: stdin closes when our attach ends.
                    stdin_open=bool(self._wrapper),
                    environment=environment, user=self._user or None, host_config=host_config,
                    networking_config=networking, detach=not self._wrapper,
                    labels={LABEL_RUN: self.run_id, LABEL_NAME: self.spec.name, LABEL_TASK: task.key},
                )
            except docker.errors.APIError as exc:
                raise LaunchError(f"{task.key}: cannot create container {name}: {exc.explanation or exc}") from None
            cid = created["Id"]
            self._created.append(cid)
            lifeline = None
            if self._wrapper:
                # The only client on stdin: when this process dies the kernel closes the socket,
                # the engine closes the container's stdin (stdin_once) and the wrapper stops the task.
                lifeline = client.api.attach_socket(cid, params={"stdin": 1, "stream": 1})
            try:
                client.api.start(cid)
            except docker.errors.APIError as exc:
                # e.g. the entrypoint is not in the image: report it as the task's failure
                msg = (exc.explanation or str(exc)).splitlines()[0]
                on_line(task.key, f"tfcluster: cannot start container {name}: {msg}")
            handle = DockerTask(task, self, cid, name, on_line)
            handle.lifeline = lifeline
            self._handles[task.key] = handle
            self._lifelines.append(lifeline)
            return handle

    def port_open(self, task: PlannedTask) -> bool:
        if task.port is None:
            return True
        handle = self._handles.get(task.key)
        if handle is None:
            return False
        ip = handle.ip()
        if not ip:
            return False
        try:
            with socket.create_connection((ip, task.port), timeout=0.5):
                return True
        except OSError:
            return False

    def close(self) -> None:
        """Remove every container and the network this run created (by id)."""
        if self._client is None:
            return
        for sock in self._lifelines:
            _close_quietly(sock)
        self._lifelines.clear()
        left = []
        for cid in reversed(self._created):
            try:
                _remove(self._client, cid)
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

    def down(self, run: RecordedRun, console: Console) -> bool:
        """Remove what the run left behind: its containers and network, by run id."""
        run_id = run.run_id
        tasks = run.tasks
        urls = {t.get("engine") for t in tasks.values() if t.get("engine")}
        if urls:
            # The engine the run used; a unix socket needs no TLS settings from the environment.
            recorded = urls.pop()
            if recorded != self.url and recorded.startswith("unix://"):
                self.url, self._explicit = recorded, True
        client = self.client
        removed: list[str] = []
        ids = {t["container_id"]: t.get("container", t["container_id"][:12]) for t in tasks.values()
               if t.get("container_id")}
        for c in client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}):
            ids.setdefault(c["Id"], (c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        for cid, name in ids.items():
            if _remove(client, cid, grace=self.spec.watchdog.stop_grace):
                removed.append(name)
        nets = client.api.networks(filters={"label": f"{LABEL_RUN}={run_id}"})
        for net in nets:
            try:
                client.api.remove_network(net["Id"])
                removed.append(f"network {net['Name']}")
            except docker.errors.NotFound:
                pass
        if removed:
            console.info(f"removed {', '.join(removed)}")
        self.close()
        return bool(removed)


def _remove(client: Any, cid: str, grace: float = 0.0) -> bool:
    """Stop (SIGTERM, then SIGKILL after ``grace``) and remove a container; False if it was gone."""
    try:
        if grace > 0:
            client.api.stop(cid, timeout=int(max(1, grace)))
        client.api.remove_container(cid, force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == 409:  # removal already in progress
            return True
        raise


def _close_quietly(sock: Any) -> None:
    if sock is None:
        return
    try:
        raw = getattr(sock, "_sock", sock)
        raw.close()
        sock.close()
    except Exception:  # noqa: BLE001
        pass


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give the container's user the state directory (only what is not theirs already)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            try:
                st = os.lstat(name)
                if st.st_uid != uid or st.st_gid != gid:
                    os.lchown(name, uid, gid)
            except OSError:
                pass


__all__ = ["DockerBackend", "DockerTask", "connect", "engine_url"]
