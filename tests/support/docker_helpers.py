"""What the docker lab's tests share (the engine itself is tests/labs/docker.py): a docker spec,
the CLI run from the checkout, and what a run left on the engine."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.labs import docker as eng
from tests.support.cli import start_tfcluster, tfcluster
from tests.support.specs import spec_file


def docker_spec(tmp_path: Path, engine_url: str, entrypoint: str, name: str = "dk", extra: str = "",
                max_restarts: int = 0, image: str = eng.WORKER_IMAGE) -> Path:
    return spec_file(tmp_path, (
        f"name: {name}\n"
        "strategy: multi_worker_mirrored\n"
        "backend: docker\n"
        f"entrypoint: {json.dumps(entrypoint)}\n"
        "tasks: {worker: 2}\n"
        "env: {TF_CPP_MIN_LOG_LEVEL: '2'}\n"
        f"restart: {{max_restarts: {max_restarts}}}\n"
        "watchdog: {startup_timeout: 240, stop_grace: 3}\n"
        f"docker:\n  image: {image}\n  engine: {engine_url}\n" + extra
    ))


def tfcluster_at_repo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``tfcluster ARGS`` run in the checkout (the path the lab's images mount)."""
    return tfcluster(*args, timeout=timeout, cwd=eng.REPO, env={"PYTHONPATH": str(eng.REPO)})


def _listed(client, name: str) -> list[dict]:
    """Run ``name``'s containers (name, status) in one call of the engine's API: the SDK's
    ``containers.list`` inspects each one after listing, and a container removed between the two
    (a run's restart, its end) fails it with a 404."""
    return [{"name": c["Names"][0].lstrip("/"), "status": c["State"]}
            for c in client.api.containers(all=True, filters={"label": f"tfcluster.name={name}"})]


def leftovers(engine: eng.Engine, name: str) -> tuple[list, list]:
    """The containers and networks that run ``name`` left on ``engine``."""
    client = engine.client()
    try:
        containers = _listed(client, name)
        networks = client.networks.list(filters={"label": f"tfcluster.name={name}"})
        return [c["name"] for c in containers], [n.name for n in networks]
    finally:
        client.close()


def containers_in(engine: eng.Engine, name: str, status: str, count: int = 2) -> bool:
    """Run ``name`` has ``count`` containers on ``engine``, every one in ``status``."""
    client = engine.client()
    try:
        containers = _listed(client, name)
        return len(containers) == count and all(c["status"] == status for c in containers)
    finally:
        client.close()


def container_states(engine: eng.Engine, name: str) -> str:
    """Run ``name``'s containers on ``engine`` and each one's status, for a wait's failure message."""
    client = engine.client()
    try:
        containers = _listed(client, name)
        return ", ".join(f"{c['name']}: {c['status']}" for c in containers) or "no containers"
    finally:
        client.close()


def containers_exited(engine: eng.Engine, name: str, count: int = 2) -> bool:
    """Run ``name`` has ``count`` containers on ``engine``, every one exited (stopped, not removed)."""
    return containers_in(engine, name, "exited", count)


def containers_running(engine: eng.Engine, name: str, count: int = 2) -> bool:
    """Run ``name`` has ``count`` containers on ``engine``, every one started and running."""
    return containers_in(engine, name, "running", count)


def launch_up(spec: Path, *args: str) -> subprocess.Popen:
    """``tfcluster up SPEC ARGS`` started in the checkout, its output one text pipe."""
    return start_tfcluster("up", spec, *args, cwd=eng.REPO, env={"PYTHONPATH": str(eng.REPO)}, new_session=False)


def reap(proc: subprocess.Popen) -> None:
    """Never leave a launcher behind: Ctrl-C it (it removes its containers), then kill it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def latest_run_dir(spec: Path, name: str = "dk") -> Path:
    """The record of the spec's latest run (runs/NAME/latest beside the spec)."""
    return (spec.parent / "runs" / name / "latest").resolve()
