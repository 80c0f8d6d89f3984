"""backend: docker on a real (private) Docker engine: the demo trains in containers, a killed
container triggers a group restart in new containers, Ctrl-C and crashes leave nothing behind,
and a missing engine or image is one clear line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.labs import docker as eng
from tests.support.docker_helpers import (container_states, containers_exited, containers_running, docker_spec,
                                          latest_run_dir, launch_up, leftovers, reap, tfcluster_at_repo)
from tests.support.prereq import require_tool
from tests.support.waits import wait_for
import launcher.record.events as ev
from tests.support.records import read_records

# Generous: the first test on a fresh machine also builds the image (debootstrap, pip, build).
pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(1500)]

REPO = eng.REPO
# Short: the machine is shared; 2 epochs of 15 steps still exercise MWMS across two containers.
DEMO_ARGS = "python -m worker --epochs 2 --steps-per-epoch 15 --batch-size 16 --progress-every 5"


_launch = launch_up
_reap = reap
_run_dir = latest_run_dir


def _run(spec: Path, *args: str, timeout: float = 600) -> tuple[int, str]:
    proc = _launch(spec, *args)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"tfcluster up did not finish within {timeout} s:\n{out[-4000:]}")
    finally:
        _reap(proc)
    return proc.returncode, out


# ------------------------------------------------------------------ compose


def test_generated_compose_passes_docker_compose_config(tmp_path):
    compose = require_tool("docker-compose", "docker-compose")
    spec = tmp_path / "cluster.yaml"
    spec.write_text((REPO / "cluster.yaml").read_text())
    spec.write_text(spec.read_text() + "docker:\n  build: {base_image: 'python:3.11-slim'}\n")  # the worker image
    out = tmp_path / "compose" / "docker-compose.yml"
    out.parent.mkdir()
    result = tfcluster_at_repo("compose", str(spec), "-o", str(out))
    assert result.returncode == 0, result.stderr
    context = out.parent / "tfcluster-image"  # where the file says its context goes, as its note says
    assert tfcluster_at_repo("image", "print", "--context", str(context)).returncode == 0
    check = subprocess.run([compose, "-f", str(out), "config", "-q"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    resolved = subprocess.run([compose, "-f", str(out), "config"], capture_output=True, text=True, timeout=60)
    assert "worker-0" in resolved.stdout and "on-failure" not in resolved.stdout


def test_compose_with_chief_evaluator_volumes_and_dollars_passes_config(tmp_path):
    compose = require_tool("docker-compose", "docker-compose")
    (tmp_path / "data").mkdir()
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "name: full\nstrategy: multi_worker_mirrored\nentrypoint: ['sh', '-c', 'echo $TF_CONFIG && python -m worker']\n"
        "tasks: {chief: 1, worker: 2, evaluator: 1}\nenv: {PRICE: '$5', EMPTY: ''}\n"
        "docker:\n  image: registry.example/team/worker:1.2\n  volumes: ['./data:/data:ro']\n  user: '1234:1234'\n"
        "  build: {context: ., dockerfile: Dockerfile, args: {A: 'x$y'}, network: host}\n"
    )
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    out = tmp_path / "docker-compose.yml"
    assert tfcluster_at_repo("compose", str(spec)).returncode == 0
    check = subprocess.run([compose, "-f", str(out), "config"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert "WARNING" not in check.stderr, check.stderr  # no unset-variable interpolation
    import yaml

    doc = yaml.safe_load(check.stdout)
    assert set(doc["services"]) == {"chief-0", "worker-0", "worker-1", "evaluator-0"}
    # `config` prints values still escaped: $$ is compose's literal dollar, not a variable.
    assert doc["services"]["worker-1"]["environment"]["PRICE"] == "$$5"
    assert doc["services"]["chief-0"]["command"][-1] == "echo $$TF_CONFIG && python -m worker"


def test_generated_compose_runs_with_plain_docker_compose(tmp_path, docker_engine, worker_image):
    """The file works without tfcluster: compose up runs both tasks with their TF_CONFIG."""
    compose = require_tool("docker-compose", "docker-compose")
    # worker-0 ends first (its code is the run's), once worker-1 has printed: the shared state
    # dir tells it, so a slow start of worker-1's container cannot lose its line.
    script = ("import json, os, pathlib, time; t = json.loads(os.environ['TF_CONFIG'])['task']; "
              "state = pathlib.Path(os.environ['TFCLUSTER_STATE_DIR']); "
              "print('compose task', t['type'], t['index'], 'uid', os.getuid(), 'literal $HOME', flush=True); "
              "(state / ('ok-%d' % t['index'])).write_text('x'); start = time.time(); "
              "[time.sleep(0.1) for _ in iter(lambda: t['index'] == 0 and not (state / 'ok-1').exists() "
              "and time.time() - start < 60, False)]; time.sleep(3 * t['index'])")
    spec = docker_spec(tmp_path, docker_engine.url, f"python -c {json.dumps(script)}", name="dkc")
    out = tmp_path / "docker-compose.yml"
    assert tfcluster_at_repo("compose", str(spec), "-o", str(out), "--image", worker_image).returncode == 0
    env = {**os.environ, "DOCKER_HOST": docker_engine.url, "COMPOSE_PROJECT_NAME": "tfclustertest"}
    base = [compose, "-f", str(out)]
    try:
        up = subprocess.run([*base, "up", "--abort-on-container-exit", "--exit-code-from", "worker-0"],
                            capture_output=True, text=True, timeout=180, env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "compose task worker 0 uid 1000 literal $HOME" in up.stdout, up.stdout  # $$ reached as $
        assert "compose task worker 1 uid 1000" in up.stdout
    finally:
        down = subprocess.run([*base, "down", "--volumes"], capture_output=True, text=True, timeout=120, env=env)
    assert down.returncode == 0, down.stderr
    client = docker_engine.client()
    try:
        left = client.containers.list(all=True, filters={"label": "com.docker.compose.project=tfclustertest"})
        assert left == []
    finally:
        client.close()


# ------------------------------------------------------------------ engine / image errors (no engine needed)


def test_engine_down_is_one_clear_line(tmp_path):
    sock = tmp_path / "nothing.sock"
    spec = docker_spec(tmp_path, f"unix://{sock}", "true")
    result = tfcluster_at_repo("up", str(spec))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [f"tfcluster: error: cannot reach the Docker engine at unix://{sock}: is dockerd running? "
                     "(start it, or point docker.engine / DOCKER_HOST at a running engine)"], result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_missing_image_without_build_is_one_clear_line(tmp_path, docker_engine):
    spec = docker_spec(tmp_path, docker_engine.url, "true", image="tfcluster-test-nothing:none", extra="  pull: never\n")
    result = tfcluster_at_repo("up", str(spec))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "docker.image: image 'tfcluster-test-nothing:none' is not on the Docker engine" in lines[0]
    assert "tfcluster image build -t tfcluster-test-nothing:none" in lines[0]


def test_missing_image_that_cannot_be_pulled_is_one_clear_line(tmp_path, docker_engine):
    # A registry on a closed loopback port: the pull is refused at once, and no traffic
    # leaves this machine (a bare name would send the engine to Docker Hub).
    spec = docker_spec(tmp_path, docker_engine.url, "true", image="127.0.0.1:9/tfcluster-test-nothing:none")
    result = tfcluster_at_repo("up", str(spec))
    assert result.returncode == 1
    err = [line for line in result.stderr.strip().splitlines() if "pulling image" not in line]
    assert len(err) == 1 and "and pulling it failed (" in err[0] and "check the name and registry login" in err[0], err


def test_broken_build_is_reported(tmp_path, docker_engine, base_image):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {base_image}\nRUN exit 3\n")
    extra = "  build: {context: ctx, dockerfile: Dockerfile}\n"
    spec = docker_spec(tmp_path, docker_engine.url, "true", image="tfcluster-test-broken:1", extra=extra)
    result = tfcluster_at_repo("up", str(spec), timeout=300)
    assert result.returncode == 1
    assert "docker.build: building image 'tfcluster-test-broken:1' failed" in result.stderr
    assert "Traceback" not in result.stderr


def test_image_is_built_from_the_spec_when_missing(tmp_path, docker_engine, worker_image, wheelhouse_url):
    """docker.build with no context: the backend builds tfcluster's worker image itself (the packaged
    Dockerfile on the context made from the install; layers cached by the fixture, which builds the same)."""
    tag = "tfcluster-test-worker:from-spec"
    args = eng.build_args(wheelhouse_url)
    extra = (f"  build:\n    network: host\n    base_image: {args['BASE_IMAGE']}\n"
             f"    args: {{PIP_NO_INDEX: '1', PIP_FIND_LINKS: '{args['PIP_FIND_LINKS']}'}}\n")
    spec = docker_spec(tmp_path, docker_engine.url, "true", image=tag, extra=extra)
    result = tfcluster_at_repo("up", str(spec), "--dry-run", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"built image {tag}" in result.stderr
    client = docker_engine.client()
    try:
        user = client.images.get(tag).attrs["Config"]["User"]
        assert user and not user.startswith("0")  # non-root
        client.images.remove(tag)
    finally:
        client.close()


# ------------------------------------------------------------------ running containers


def test_trivial_entrypoint_env_mounts_and_cleanup(tmp_path, docker_engine, worker_image):
    script = (
        "import json, os, pathlib; t = json.loads(os.environ['TF_CONFIG']); "
        "print('hello from', os.environ['TFCLUSTER_TASK'], 'as uid', os.getuid(), t['cluster']['worker'], flush=True); "
        "pathlib.Path(os.environ['TFCLUSTER_STATE_DIR'], os.environ['TFCLUSTER_TASK'].replace(':', '-')).write_text('x')"
    )
    spec = docker_spec(tmp_path, docker_engine.url, f"python -c {json.dumps(script)}")
    code, out = _run(spec, timeout=180)
    assert code == 0, out
    assert re.search(r"worker:0.*hello from worker:0 as uid 1000 \['worker-0:23456', 'worker-1:23456'\]", out), out
    assert "hello from worker:1" in out
    state = spec.parent / "runs" / "dk" / "state"
    assert (state / "worker-0").is_file()  # written in the container, visible on the host
    run = _run_dir(spec)
    assert "hello from worker:1" in (run / "logs" / "worker-1.log").read_text()
    info = json.loads((run / "launcher.json").read_text())
    assert info["tasks"]["worker:0"]["container"] == f"tfcluster-dk-{run.name}-worker-0"
    assert leftovers(docker_engine, "dk") == ([], [])


def test_a_launcher_of_the_users_in_the_working_dir_does_not_replace_the_wrapper(tmp_path, docker_engine,
                                                                                 worker_image):
    """The user's code in the container's working directory (here mounted over the image's
    /home/tfcluster) has a ``launcher/`` package, a common name: the lifeline wrapper, run as a
    file, is still tfcluster's (``python -m launcher.remote.taskwrap`` would import the user's)."""
    code_dir = tmp_path / "code"
    (code_dir / "launcher").mkdir(parents=True)
    (code_dir / "launcher" / "__init__.py").write_text("raise SystemExit('the user launcher ran')\n")
    spec = docker_spec(tmp_path, docker_engine.url, "python -c \"print('task ran', flush=True)\"",
                       extra=f"  volumes: ['{code_dir}:/home/tfcluster:ro']\n")
    code, out = _run(spec, timeout=180)
    assert code == 0 and "the user launcher ran" not in out, out
    assert out.count("task ran") >= 2, out
    assert leftovers(docker_engine, "dk") == ([], [])


def test_failing_task_is_reported_and_cleaned_up(tmp_path, docker_engine, worker_image):
    script = "import os, sys; print('boom', flush=True); sys.exit(3 if os.environ['TFCLUSTER_TASK'] == 'worker:1' else 0)"
    spec = docker_spec(tmp_path, docker_engine.url, f"python -c {json.dumps(script)}")
    code, out = _run(spec, timeout=180)
    assert code == 1, out
    assert "worker:1 failed: exit code 3" in out, out
    assert leftovers(docker_engine, "dk") == ([], [])


def test_missing_entrypoint_in_image_fails_cleanly(tmp_path, docker_engine, worker_image):
    spec = docker_spec(tmp_path, docker_engine.url, "no-such-command --flag")
    code, out = _run(spec, timeout=180)
    assert code == 1, out
    assert "no-such-command" in out and "Traceback" not in out
    assert leftovers(docker_engine, "dk") == ([], [])


def test_ctrl_c_leaves_no_container_or_network(tmp_path, docker_engine, worker_image):
    spec = docker_spec(tmp_path, docker_engine.url,
                 "python -c \"import time; print('up', flush=True); time.sleep(600)\"")
    proc = _launch(spec)
    try:
        wait_for(lambda: len(leftovers(docker_engine, "dk")[0]) == 2, 120, 0.5, what="both containers", proc=proc)
        wait_for(lambda: (_run_dir(spec) / "logs" / "worker-1.log").exists(), 60, 0.5, what="output of worker:1",
                 proc=proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        _reap(proc)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert leftovers(docker_engine, "dk") == ([], [])


def test_killed_launcher_tasks_stop_and_down_removes_them(tmp_path, docker_engine, worker_image):
    spec = docker_spec(tmp_path, docker_engine.url, "python -c \"import time; time.sleep(600)\"")
    proc = _launch(spec)
    try:
        # Both running, not only created: a launcher killed between a container's create and its
        # start leaves it "created", never started, so there is nothing for a lifeline to stop.
        wait_for(lambda: containers_running(docker_engine, "dk"), 120, 0.5, what="both containers running", proc=proc)
        proc.kill()  # a crash: no chance to clean up
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # The stdin lifeline: with the launcher gone, each task's wrapper stops it (grace 3 s).
    wait_for(lambda: containers_exited(docker_engine, "dk"), 60, 0.5, what="the lifeline to stop both tasks",
             detail=lambda: container_states(docker_engine, "dk"))
    names, nets = leftovers(docker_engine, "dk")
    assert len(names) == 2 and len(nets) == 1  # stopped, not removed: that is tfcluster down's job
    result = tfcluster_at_repo("down", str(spec), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "removed" in result.stderr
    assert leftovers(docker_engine, "dk") == ([], [])


def test_demo_trains_in_containers(tmp_path, docker_engine, worker_image):
    spec = docker_spec(tmp_path, docker_engine.url, DEMO_ARGS)
    started = time.monotonic()
    code, out = _run(spec, "--verbose", timeout=900)  # (verbose: the tasks' records, their results, shown)
    assert code == 0, out[-6000:]
    assert "run succeeded after 1 attempt(s)" in out
    results = re.findall(r"tfcluster-result task=(worker:\d) epochs=2 epochs_run=2 .*accuracy=([0-9.]+)", out)
    assert {r[0] for r in results} == {"worker:0", "worker:1"}, out[-4000:]
    assert all(0.0 <= float(r[1]) <= 1.0 for r in results)
    state = spec.parent / "runs" / "dk" / "state"
    assert any(state.rglob("ckpt-002*")), sorted(str(p) for p in state.rglob("*"))[:20]
    # The startup watchdog saw each TF server listen on its container's address.
    events = read_records(_run_dir(spec))
    assert {e["task"] for e in events if isinstance(e, ev.Ready)} == {"worker:0", "worker:1"}
    assert leftovers(docker_engine, "dk") == ([], [])
    print(f"demo in containers: {time.monotonic() - started:.0f} s")


def test_killed_container_group_restart_starts_new_containers(tmp_path, docker_engine, worker_image):
    """The cold restart (warm_standby: false): worker:1's container SIGKILLed (exit 137,
    retryable), every task of the group gets a new container under its task's name, and the run
    succeeds with nothing left. A stand-in task (tests/support/standby_task.py on a volume, its
    attempt 0 running until stopped, a later one ending at once): what training resumes from
    across a docker restart is test_docker_standby.py's killed-container test, with the
    reference worker; what a restart is allowed is the supervisor's (tests/unit/supervise/)."""
    spec = docker_spec(tmp_path, docker_engine.url, "python /stub/standby_task.py", max_restarts=2,
                       extra=f"  volumes: ['{REPO / 'tests' / 'support'}:/stub']\n")
    spec.write_text(spec.read_text().replace("restart: {max_restarts: 2}", "restart: {max_restarts: 2, warm_standby: false}"))
    proc = _launch(spec)
    try:
        log = lambda key: _run_dir(spec) / "logs" / f"{key}.log"  # noqa: E731
        wait_for(lambda: all(log(k).exists() and "standby-task key=" in log(k).read_text() for k in ("worker-0", "worker-1")),
                 120, 0.5, what="both tasks' first lines", proc=proc)
        client = docker_engine.client()
        try:
            client.containers.get(f"tfcluster-dk-{_run_dir(spec).name}-worker-1").kill()
        finally:
            client.close()
        out, _ = proc.communicate(timeout=300)
    finally:
        _reap(proc)
    assert proc.returncode == 0, out[-6000:]
    assert "worker:1 failed: killed by SIGKILL (exit 137)" in out, out[-6000:]
    assert "restarting the whole group (restart 1 of 2)" in out, out[-6000:]
    assert "run succeeded after 2 attempt(s)" in out and "(standby)" not in out
    starts = [e for e in read_records(_run_dir(spec)) if isinstance(e, ev.Start)]
    run = _run_dir(spec).name
    assert sorted((e["attempt"], e["task"], e["container"]) for e in starts) == [
        (a, k, f"tfcluster-dk-{run}-{k.replace(':', '-')}") for a in (0, 1) for k in ("worker:0", "worker:1")], starts
    assert len({e["container_id"] for e in starts}) == 4, starts  # a new container for every task
    for key in ("worker-0", "worker-1"):
        assert re.search(r"^standby-task key=\S+ attempt=1 ", log(key).read_text(), re.M), log(key).read_text()[-2000:]
    assert leftovers(docker_engine, "dk") == ([], [])


def test_taken_container_name_is_reported_before_start(tmp_path, docker_engine, worker_image):
    from launcher.backends.docker.backend import DockerBackend
    from launcher.errors import LaunchError
    from launcher.app.up import plan_for
    from launcher.record.writer import RunRecord
    from launcher.loader.load import load_spec

    loaded = load_spec(docker_spec(tmp_path, docker_engine.url, "true"))
    plan = plan_for(loaded.spec)
    record = RunRecord(tmp_path / "runs", plan, run_id="fixed-1")
    name = "tfcluster-dk-fixed-1-worker-1"
    client = docker_engine.client()
    squatter = client.containers.create(worker_image, ["true"], name=name)
    try:
        backend = DockerBackend.from_spec(loaded, record)
        with pytest.raises(LaunchError) as err:
            backend.hosts.probe(plan)
        assert err.value.lines == (f"container name {name} is taken (task worker:1); remove it: docker rm -f {name}",)
        backend.close()
    finally:
        squatter.remove(force=True)
        client.close()


def test_paused_container_is_caught_by_the_hang_watchdog(tmp_path, docker_engine, worker_image):
    # Listens on its TF port like a real task (the hang clock starts once every task is up),
    # then ticks until paused.
    script = ("import json, os, socket, time; c = json.loads(os.environ['TF_CONFIG']); s = socket.socket(); "
              "s.bind(('0.0.0.0', int(c['cluster']['worker'][c['task']['index']].rsplit(':', 1)[1]))); s.listen(); "
              "[print('tick', flush=True) or time.sleep(0.5) for _ in iter(int, 1)]")
    spec = docker_spec(tmp_path, docker_engine.url, f"python -c {json.dumps(script)}")
    spec.write_text(spec.read_text().replace("watchdog: {startup_timeout: 240, stop_grace: 3}",
                                             "watchdog: {startup_timeout: 600, hang_timeout: 8, stop_grace: 3}"))
    proc = _launch(spec)
    try:
        wait_for(lambda: len(leftovers(docker_engine, "dk")[0]) == 2, 120, 0.5, what="both containers", proc=proc)
        wait_for(lambda: (_run_dir(spec) / "logs" / "worker-1.log").exists(), 60, 0.5, what="output of worker:1",
                 proc=proc)
        client = docker_engine.client()
        try:
            client.containers.get(f"tfcluster-dk-{_run_dir(spec).name}-worker-1").pause()
        finally:
            client.close()
        out, _ = proc.communicate(timeout=120)
    finally:
        _reap(proc)
    assert proc.returncode == 1, out
    assert "worker:1 failed: hung: no progress for 8 s (watchdog.hang_timeout); container is paused" in out, out
    assert leftovers(docker_engine, "dk") == ([], [])  # a paused container is removed too
