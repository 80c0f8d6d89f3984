"""A private Docker engine and locally built images for the docker integration tests.

Nothing here reaches an image registry: the base image is a ``debootstrap`` of Debian
bookworm (+ python3, venv, tini) imported into the engine, and the worker image installs the
project's ``[tf]`` extra from wheels ``pip download``-ed on the host and served to the build
over loopback. Everything is cached under ROOT (default /var/lib/tfcluster-test-docker), so
only the first session on a machine pays for debootstrap, the download and the build.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("TFCLUSTER_TEST_DOCKER_ROOT", "/var/lib/tfcluster-test-docker"))
# Short: unix socket paths are limited to 107 bytes.
EXEC_ROOT = Path("/run/tfcluster-test-docker")
BASE_IMAGE = "tfcluster-test-base:bookworm"
WORKER_IMAGE = "tfcluster-test-worker:latest"
# Kept clear of the usual 172.17/16 so a machine's own dockerd does not collide with ours.
ADDRESS_POOL = "base=10.213.0.0/16,size=24"
WHEELHOUSE_PORT = 38471
DEBIAN_MIRROR = os.environ.get("TFCLUSTER_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def log(msg: str) -> None:
    print(f"[docker-engine] {msg}", file=sys.stderr, flush=True)


@dataclass
class Engine:
    url: str
    pid: int
    proc: Optional[subprocess.Popen]
    log_path: Path
    started_in: float

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.url, timeout=120)

    def cli(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.url, *args], capture_output=True, text=True,
                              timeout=timeout, check=check)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _ours(pid: int) -> bool:
    """Whether ``pid`` is a dockerd started with our exec root (a leftover of an earlier session)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(cmd) and cmd[0].endswith(b"dockerd") and str(EXEC_ROOT).encode() in cmd


def _stop_pid(pid: int, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and _pid_alive(pid) and not _zombie(pid):
        time.sleep(0.1)
    if _pid_alive(pid) and not _zombie(pid):
        os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


# How long a session waits for another one's engine (the lock below) and, in the fixtures, for the
# engine to be ready: 30 minutes, or TFCLUSTER_TEST_DOCKER_WAIT_S where suites run side by side on
# purpose (tests/race_hunt.sh) and one waits for a whole suite of another's.
SESSION_WAIT_S = float(os.environ.get("TFCLUSTER_TEST_DOCKER_WAIT_S", "1800"))


@contextlib.contextmanager
def session_lock(timeout: float = SESSION_WAIT_S) -> Iterator[None]:
    """One test session at a time uses the private engine (its paths are fixed per machine).

    Held for the whole session, so a dockerd found via our pidfile while we hold the lock can
    only be an orphan of a killed session, never another session's live engine.
    """
    import fcntl

    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / "session.lock", "w") as fh:
        end = time.monotonic() + timeout
        announced = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise RuntimeError(f"another test session held {ROOT / 'session.lock'} for {timeout:g} s")
                if not announced:
                    log("waiting for another test session to finish with the private engine")
                    announced = True
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def start_dockerd(timeout: float = 60.0, nice: int = 0) -> Engine:
    """Start a private dockerd (own data root, exec root, socket, pidfile); wait until it answers.
    ``nice``: its CPU niceness, inherited by containerd and every container it starts."""
    dockerd = shutil.which("dockerd")
    assert dockerd, "dockerd not found (tests/setup/docker.sh installs docker.io)"
    (ROOT / "data").mkdir(parents=True, exist_ok=True)
    EXEC_ROOT.mkdir(parents=True, exist_ok=True)
    pidfile = EXEC_ROOT / "dockerd.pid"
    sock = EXEC_ROOT / "docker.sock"
    if pidfile.exists():
        try:
            old = int(pidfile.read_text().strip())
        except ValueError:
            old = 0
        if old and _ours(old):
            log(f"stopping leftover test dockerd pid {old} from an earlier session")
            _stop_pid(old)
        pidfile.unlink(missing_ok=True)
    sock.unlink(missing_ok=True)
    # The network store holds nothing worth keeping between sessions (every network here is
    # per test run), and one left by a killed session can make dockerd 20.10 panic on restore
    # (libnetwork reservePools: index out of range). Images and layers stay cached.
    shutil.rmtree(ROOT / "data" / "network", ignore_errors=True)
    log_path = ROOT / "dockerd.log"
    argv = [
        dockerd,
        "--iptables=false",
        "--ip-masq=false",
        "--bridge=none",
        f"--default-address-pool={ADDRESS_POOL}",
        f"--data-root={ROOT / 'data'}",
        f"--exec-root={EXEC_ROOT}",
        f"--host=unix://{sock}",
        f"--pidfile={pidfile}",
        "--storage-driver=overlay2",
    ]
    started = time.monotonic()
    logfh = open(log_path, "ab")
    proc = subprocess.Popen(argv, stdout=logfh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=(lambda: os.nice(nice)) if nice else None)
    logfh.close()
    url = f"unix://{sock}"
    import docker

    end = started + timeout
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-8:]
            raise RuntimeError(f"dockerd exited with {proc.returncode}:\n" + "\n".join(tail))
        try:
            client = docker.DockerClient(base_url=url, timeout=5)
            client.ping()
            client.close()
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > end:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"dockerd did not answer on {sock} within {timeout:g} s; see {log_path}")
            time.sleep(0.1)
    engine = Engine(url=url, pid=proc.pid, proc=proc, log_path=log_path, started_in=time.monotonic() - started)
    log(f"dockerd pid {proc.pid} up on {url} in {engine.started_in:.2f} s")
    return engine


def stop_dockerd(engine: Engine, timeout: float = 30.0) -> None:
    if engine.proc is None:
        return
    with contextlib.suppress(ProcessLookupError):
        engine.proc.send_signal(signal.SIGTERM)
    try:
        engine.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        engine.proc.kill()
        engine.proc.wait(10)
    log(f"dockerd pid {engine.pid} stopped")


def unmount_under(path: Path) -> None:
    """Unmount what is mounted at or under ``path`` (deepest first, lazily): debootstrap mounts the
    new root's /proc, and one killed mid-way (a timeout, a cancelled session) leaves it there, so
    that removing the half-made root fails with 'Operation not permitted' on every later warm-up."""
    root = str(path)
    mounts = [line.split()[1].replace("\\040", " ") for line in Path("/proc/mounts").read_text().splitlines()]
    for where in sorted((m for m in mounts if m == root or m.startswith(root + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", where], check=False, timeout=60, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def ensure_base_image(engine: Engine, timeout: float = 900.0, nice: int = 0) -> None:
    """debootstrap bookworm (minbase + python3, venv, pip, tini) and import it, unless cached."""
    client = engine.client()
    try:
        client.images.get(BASE_IMAGE)
        log(f"base image {BASE_IMAGE} cached")
        return
    except Exception:  # noqa: BLE001 - ImageNotFound
        pass
    finally:
        client.close()
    rootfs = ROOT / "rootfs"
    done = rootfs / ".tfcluster-complete"
    started = time.monotonic()
    if not done.exists():
        debootstrap = shutil.which("debootstrap")
        assert debootstrap, "debootstrap not found (tests/setup/docker.sh installs it)"
        tmp = ROOT / "rootfs.tmp"
        if tmp.exists():
            unmount_under(tmp)  # a debootstrap killed mid-way leaves its /proc mounted there
            shutil.rmtree(tmp)
        log("debootstrap bookworm (first time on this machine; cached afterwards)")
        subprocess.run(
            ["nice", "-n", str(nice), debootstrap, "--variant=minbase", "--include=python3,python3-venv,python3-pip,ca-certificates,tini",
             "bookworm", str(tmp), DEBIAN_MIRROR],
            check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (tmp / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        if rootfs.exists():
            shutil.rmtree(rootfs)
        tmp.rename(rootfs)
        done.touch()
    tarball = ROOT / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "--exclude=./.tfcluster-complete", "-cf", str(tarball), "."],
                   check=True, timeout=timeout)
    repo, tag = BASE_IMAGE.split(":")
    client = engine.client()
    try:
        client.api.import_image_from_file(str(tarball), repository=repo, tag=tag,
                                          changes=["CMD [\"/bin/bash\"]"])
        client.images.get(BASE_IMAGE)
    finally:
        client.close()
        tarball.unlink(missing_ok=True)
    log(f"base image {BASE_IMAGE} imported in {time.monotonic() - started:.0f} s")


def _requirements_key() -> str:
    return hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]


def ensure_wheelhouse(timeout: float = 1800.0, nice: int = 0) -> Path:
    """Wheels for the project and its [tf] extra, downloaded on the host (cached per pyproject)."""
    wheels = ROOT / "wheels"
    marker = wheels / f".complete-{_requirements_key()}"
    if marker.exists():
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    log("pip download of the [tf] extra into the wheelhouse (first time on this machine)")
    started = time.monotonic()
    subprocess.run(
        ["nice", "-n", str(nice), sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), f"{REPO}[tf]", "setuptools>=64", "wheel"],
        check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    marker.touch()
    log(f"wheelhouse ready in {time.monotonic() - started:.0f} s")
    return wheels


@contextlib.contextmanager
def serve_dir(path: Path) -> Iterator[str]:
    """Serve ``path`` on a loopback HTTP port (for pip --find-links inside a host-network build)."""
    handler = functools.partial(_QuietHandler, directory=str(path))
    try:
        # A fixed port keeps the build arg, and so docker's layer cache key, the same across sessions.
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEELHOUSE_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # noqa: D401 - silence per-request logs
        pass


def build_args(find_links: str) -> dict[str, str]:
    return {"BASE_IMAGE": BASE_IMAGE, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": find_links}


def build_worker_image(engine: Engine, find_links: str, tag: str = WORKER_IMAGE, timeout: int = 1800) -> float:
    """The worker image (docker/Dockerfile on the context ``make_context`` writes from the
    checkout's editable install) on the test base image, offline from the wheelhouse."""
    import tempfile

    from launcher.image import make_context

    client = engine.client()
    started = time.monotonic()
    tail: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tfcluster-lab-image-") as tmp:
            context = make_context(Path(tmp) / "context")
            for chunk in client.api.build(path=str(context), dockerfile="Dockerfile", tag=tag,
                                          buildargs=build_args(find_links), network_mode="host", rm=True,
                                          forcerm=True, decode=True, timeout=timeout):
                if "error" in chunk:
                    raise RuntimeError(f"image build failed: {chunk['error']}\n" + "\n".join(tail))
                for line in (chunk.get("stream") or "").splitlines():
                    tail = (tail + [line])[-30:]
    finally:
        client.close()
    took = time.monotonic() - started
    log(f"worker image {tag} built in {took:.0f} s")
    return took


def remove_leftovers(engine: Engine) -> None:
    """Remove whatever a failed test or a killed session left in the private engine (ours alone)."""
    try:
        client = engine.client()
        for c in client.containers.list(all=True):
            c.remove(force=True)
        for n in client.networks.list():
            if n.name not in ("bridge", "host", "none"):
                n.remove()
        client.close()
    except Exception as exc:  # noqa: BLE001
        log(f"cleanup of the private engine failed: {exc}")


def renice_tree(root: int, value: int) -> None:
    """Set the niceness of ``root`` and every process below it (root may lower it)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    todo = [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, value)
        todo.extend(children.get(pid, ()))


class Warmup:
    """The private engine and the test images, prepared in a background thread from the start
    of the session: on a fresh machine debootstrap (~50 s), the wheel download (~30 s, at the
    same time) and the worker image build (~90 s) then overlap the tests that run before the
    docker ones (tests/conftest.py orders those last) instead of adding to the session. The
    work runs at nice 19 (dockerd and its build containers inherit it), so the tests running
    meanwhile keep the CPU; once the images are built the engine is set back to nice 0.

    The fixtures wait for what they need (``engine()``, ``images()``) and get the error the
    warm-up met, if any; ``close()`` stops it all (idempotent)."""

    NICE = 19

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._engine: Optional[Engine] = None
        self._engine_ready = threading.Event()
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        self._closed = False
        self.wheelhouse_url = ""
        self.build_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="docker-warmup", daemon=True)

    def start(self) -> "Warmup":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._stack.enter_context(session_lock())
            self._engine = start_dockerd(timeout=60, nice=self.NICE)
            self._stack.callback(stop_dockerd, self._engine)
            remove_leftovers(self._engine)  # left in the cached data root by a killed session
            self._stack.callback(remove_leftovers, self._engine)
            self._engine_ready.set()
            wheels: dict = {}
            fetch = threading.Thread(target=lambda: wheels.update(
                path=_catch(lambda: ensure_wheelhouse(nice=self.NICE))), daemon=True)
            fetch.start()
            ensure_base_image(self._engine, nice=self.NICE)
            fetch.join()
            path = wheels["path"]
            if isinstance(path, BaseException):
                raise path
            self.wheelhouse_url = self._stack.enter_context(serve_dir(path))
            self.build_seconds = build_worker_image(self._engine, self.wheelhouse_url)
            renice_tree(self._engine.pid, 0)
        except BaseException as exc:  # noqa: BLE001 - handed to the fixtures
            self._error = exc
        finally:
            self._engine_ready.set()
            self._done.set()

    def _wait(self, event: threading.Event, what: str, timeout: float) -> None:
        if not event.wait(timeout):
            raise RuntimeError(f"the docker warm-up did not {what} within {timeout:g} s")

    def wait_for_engine(self, timeout: float = SESSION_WAIT_S) -> None:
        """Until the engine is up or the warm-up failed (``engine()`` then says which), raising nothing."""
        self._engine_ready.wait(timeout)

    def engine(self, timeout: float = SESSION_WAIT_S) -> Engine:
        self._wait(self._engine_ready, "start the engine", timeout)
        if self._engine is None:
            raise RuntimeError(f"the private docker engine did not start: {self._error}") from self._error
        return self._engine

    def images(self, timeout: float = SESSION_WAIT_S) -> None:
        self._wait(self._done, "build the images", timeout)
        if self._error is not None:
            raise RuntimeError(f"the docker test images could not be prepared: {self._error}") from self._error

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive() and self._engine is not None:
            stop_dockerd(self._engine)  # a build still running ends with its engine
        self._thread.join(120)
        self._stack.close()


def _catch(fn):
    try:
        return fn()
    except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
        return exc
