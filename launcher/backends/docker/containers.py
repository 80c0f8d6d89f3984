"""A task's container: its labels and HostConfig, created with its stdin lifeline and started,
watched (logs, exit) as a TaskHandle, and removed by id."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from launcher.bounded import shown
from launcher.errors import LaunchError
from launcher.plan import containergpus as gpus
from launcher.plan.build import PlannedTask
from launcher.backends.base import OutputSink, TaskHandle
from launcher.backends.channel import Decoder
from launcher.backends.process import ProcessInfo
from launcher.backends.docker.engine import docker

LABEL_RUN = "tfcluster.run_id"
LABEL_NAME = "tfcluster.name"
LABEL_TASK = "tfcluster.task"


def labels(run_id: str, name: str, task_key: str = "") -> dict:
    """What ``tfcluster down`` finds a run's containers and network by (the run id, exactly)."""
    out = {LABEL_RUN: run_id, LABEL_NAME: name}
    if task_key:
        out[LABEL_TASK] = task_key
    return out


def not_own(found: Optional[Mapping[str, Any]], run_id: str, name: str) -> Optional[str]:
    """Why a container (or network) whose labels are ``found`` cannot be proven to be run
    ``run_id`` of spec ``name`` (None: proven). Pure. ``tfcluster down`` removes nothing a run
    record names by id until its labels, set by tfcluster when it created it, say it is this
    run's: a tampered or planted record could name any container on the engine."""
    got = dict(found or {})
    if LABEL_RUN not in got:
        return f"it has no {LABEL_RUN} label (tfcluster did not create it)"
    if got[LABEL_RUN] != run_id:
        return f"its label {LABEL_RUN} is {shown(str(got[LABEL_RUN]), 60)}, not {run_id}"
    if got.get(LABEL_NAME) != name:
        return f"its label {LABEL_NAME} is {shown(str(got.get(LABEL_NAME)), 60)}, not {name}"
    return None


def host_config(client: Any, binds: Optional[dict], container: Optional[gpus.Container], init: bool) -> dict:
    """The HostConfig of a task's container: its mounts, its GPUs (a device request for
    the engine host's indices) and its /dev/shm."""
    c = container or gpus.Container()
    requests = [docker.types.DeviceRequest(device_ids=[str(i) for i in c.device_ids], capabilities=[["gpu"]])
                ] if c.device_ids else None
    return client.api.create_host_config(binds=binds, init=init or None, auto_remove=False,
                                         device_requests=requests, shm_size=c.shm_size)


def engine_cpus(client: Any) -> Optional[int]:
    """The engine's CPUs (``docker info``'s NCPU: every container sees them, tfcluster sets no
    container CPU limit); None where it does not say."""
    try:
        return int(client.info().get("NCPU") or 0) or None
    except (TypeError, ValueError):
        return None


def probe_gpu_runtime(client: Any, image: str, config: dict, label: dict, url: str,
                      device_ids: Sequence[int]) -> None:
    """Create, start and remove one container with GPUs: an engine without a GPU runtime is
    one LaunchError before any task starts."""
    cid = None
    try:
        cid = client.api.create_container(image, command=["true"], entrypoint=[], host_config=config,
                                          labels=label)["Id"]
        client.api.start(cid)
    except docker.errors.APIError as exc:
        problem = gpus.runtime_problem(url, exc.explanation or str(exc))
        if problem:
            raise LaunchError(problem) from None
        raise LaunchError(f"docker: the engine at {url} refused a container with GPUs "
                          f"{list(device_ids)}: {(exc.explanation or str(exc)).splitlines()[0][:200]}"
                          ) from None
    finally:
        if cid is not None:
            remove(client, cid)


def create_and_start(client: Any, image: str, task: PlannedTask, name: str, command: list[str],
                     environment: dict, user: Optional[str], config: dict, networking: dict, label: dict,
                     lifeline: bool, created: list[str], on_line: OutputSink) -> tuple[str, Any]:
    """Create a task's container (its id appended to ``created`` at once, for removal), attach its
    stdin when it runs under the lifeline wrapper, and start it; returns (id, the stdin socket or
    None). A container that will not start is the task's failure, said on its output."""
    try:
        made = client.api.create_container(
            image, command=command, name=name, hostname=task.address,
            # detach=False is how the SDK sets StdinOnce: stdin closes when our attach ends.
            stdin_open=lifeline,
            environment=environment, user=user or None, host_config=config,
            networking_config=networking, detach=not lifeline,
            labels=label,
        )
    except docker.errors.APIError as exc:
        raise LaunchError(f"{task.key}: cannot create container {name}: {exc.explanation or exc}") from None
    cid = made["Id"]
    created.append(cid)
    sock = None
    if lifeline:
        # The only client on stdin: when this process dies the kernel closes the socket,
        # the engine closes the container's stdin (stdin_once) and the wrapper stops the task.
        sock = client.api.attach_socket(cid, params={"stdin": 1, "stream": 1})
    try:
        client.api.start(cid)
    except docker.errors.APIError as exc:
        # e.g. the entrypoint is not in the image: report it as the task's failure
        msg = (exc.explanation or str(exc)).splitlines()[0]
        on_line(task.key, f"tfcluster: cannot start container {name}: {msg}")
    return cid, sock


def remove(client: Any, cid: str, grace: float = 0.0) -> bool:
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


def close_quietly(sock: Any) -> None:
    """Close a lifeline socket (the attached stdin), whatever state it is in."""
    if sock is None:
        return
    try:
        raw = getattr(sock, "_sock", sock)
        raw.close()
        sock.close()
    except Exception:  # noqa: BLE001
        pass


@dataclass(frozen=True)
class ContainerProcess(ProcessInfo):
    """A task's container, as the record keeps it: its name and id, the run's network, and the
    engine's URL (``down`` removes it there, by id, once its labels prove it the run's)."""

    container: str
    container_id: str
    network: str
    engine: str


class DockerTask(TaskHandle):
    """A task's container. ``backend`` is the DockerRun it was started in (its client, url and
    network_name are read; typed Any so that this module does not import the backend's)."""

    def __init__(self, task: PlannedTask, backend: Any, container_id: str, name: str,
                 on_line: OutputSink, framed: bool = False) -> None:
        """``framed``: it runs under tfcluster's wrapper with its control channel (its output
        framed: launcher/remote/taskstream.py); else its control lines are read in band."""
        super().__init__(task)
        self.framed = framed
        self.backend = backend
        self.api = backend.client.api
        self.id = container_id
        self.name = name
        self._exit: Optional[int] = None
        self._lost = ""
        self._drained = False
        self._ip: Optional[str] = None
        self.lifeline: Any = None  # the attached stdin socket; closing it stops the task
        self.promotion: Any = None  # a warm standby's promotion file here (a Path), if it has one
        self._logs = threading.Thread(target=self._pump, args=(on_line,), daemon=True, name=f"logs-{task.key}")
        self._waiter = threading.Thread(target=self._wait, daemon=True, name=f"wait-{task.key}")
        self._logs.start()
        self._waiter.start()

    # -------------------------------------------------------------- threads

    def _pump(self, on_line: OutputSink) -> None:
        decoder = Decoder(self.key, on_line, framed=self.framed, wrapper=self.wrapper_word)
        try:
            for chunk in self.api.logs(self.id, stream=True, follow=True, stdout=True, stderr=True):
                decoder.feed(chunk)
        except Exception:  # noqa: BLE001 - the engine went away or the container was removed
            pass
        decoder.end()

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

    def signal_process(self, sig: int) -> None:
        # The container's init (tini -g, or the engine's) passes it to the task's group: the task
        # (and the wrapper, which survives it) get it; nothing narrower reaches into a container.
        self.signal(sig)

    def info(self) -> "ContainerProcess":
        return ContainerProcess(container=self.name, container_id=self.id, network=self.backend.network_name,
                                engine=self.backend.url)

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

    def forget_ip(self) -> None:
        """Reconnected to the network (a promoted standby): its address is asked again."""
        self._ip = None

    def ip(self) -> Optional[str]:
        if self._ip is None:
            try:
                nets = self.api.inspect_container(self.id)["NetworkSettings"]["Networks"]
                self._ip = (nets.get(self.backend.network_name) or {}).get("IPAddress") or None
            except Exception:  # noqa: BLE001
                return None
        return self._ip
