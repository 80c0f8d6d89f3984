"""Nothing from a spec runs before `up` (docs/concepts/trust.md): `validate`, `plan`, `compose`,
`export` and `schema` start no process of the spec; `discovery.command` runs at `up` and at
`plan --discover`; a command run with a timeout ends with everything that holds its pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from launcher.loader.discovery import DiscoveryError, run_discovery
from tests.support.cli import ROOT, tfcluster

from tests.support.waits import wait_for

from .conftest import assert_bounded

SSH_SPEC = """\
name: t
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
{hosts}discovery:
  command: touch {marker}; printf 'h1 10.0.0.1\\nh2 10.0.0.2\\n'
tasks: {{worker: 2}}
"""


@pytest.mark.parametrize("hosts", ["", "hosts: [{name: h0, address: 10.0.0.9}]\n"])
def test_validate_plan_compose_export_never_run_discovery_command(tmp_path, hosts):
    marker = tmp_path / "ran"
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SSH_SPEC.format(marker=marker, hosts=hosts))
    for args in (["validate", spec], ["validate", "--json", spec], ["plan", spec], ["plan", "--json", spec],
                 ["compose", spec, "-o", "-", "--image", "x"], ["export", spec, "--to", "tfjob", "-o", "-",
                                                                 "--image", "x"]):
        result = tfcluster(*args, cwd=tmp_path)
        assert_bounded(result, (0, 2), output=True)
        assert not marker.exists(), f"tfcluster {args[0]} ran discovery.command"
    result = tfcluster("plan", spec, cwd=tmp_path)
    assert result.returncode == 0
    said = result.stdout + result.stderr
    assert "discovery.command at `up`" in said and "plan --discover" in said, said
    result = tfcluster("plan", "--discover", spec, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert marker.exists() and "10.0.0.1" in result.stdout


# Runs tfcluster's own main in this interpreter with an audit hook that records every process it
# starts (subprocess, fork, exec, spawn, system): the real CLI, watched, not a stub.
WATCH = r"""
import json, sys
started = []
def hook(event, args):
    if event in ("subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn"):
        started.append([event, str(args[0])[:200]])
sys.addaudithook(hook)
from launcher.cli.main import main
import contextlib, io
out = []
for argv in json.loads(sys.argv[1]):
    before = len(started)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    out.append([argv, code, started[before:]])
print(json.dumps(out))
"""


def _shipped_and_generated_specs(tmp_path):
    specs = [ROOT / "cluster.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]
    # Generated: the compare command's specs derived from the demo, one per strategy, and a spec of
    # each backend with discovery (where allowed) and commands planted in every field that could run.
    from launcher.compare.configs import Options, derive
    import yaml

    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    for strategy in ("default", "mirrored", "multi_worker_mirrored", "parameter_server"):
        try:
            derived = derive(raw, strategy, strategy, Options(), str(tmp_path / "runs"))
        except Exception:  # noqa: BLE001 - a strategy compare refuses for this spec: not a spec to check
            continue
        path = tmp_path / f"derived-{strategy}.yaml"
        path.write_text(yaml.safe_dump(derived))
        specs.append(path)
    for backend, extra in (("ssh", "discovery: {command: 'touch PLANTED'}\n"), ("docker", "docker: {image: x}\n"),
                           ("slurm", "")):
        path = tmp_path / f"{backend}.yaml"
        path.write_text(f"name: g\nstrategy: multi_worker_mirrored\nbackend: {backend}\n"
                        f"entrypoint: touch PLANTED\n{extra}tasks: {{worker: 2}}\n")
        specs.append(path)
    return specs


def test_validate_and_plan_of_every_shipped_and_generated_spec_start_no_process(tmp_path):
    specs = _shipped_and_generated_specs(tmp_path)
    argvs = [[cmd, str(s)] for s in specs for cmd in ("validate", "plan")]
    argvs += [["validate", "--json", str(s)] for s in specs] + [["schema"]]
    env = {**os.environ, "PATH": os.environ.get("PATH", "")}
    result = subprocess.run([sys.executable, "-c", WATCH, json.dumps(argvs)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ran = json.loads(result.stdout.splitlines()[-1])
    assert len(ran) == len(argvs)
    # `plan` asks this machine's nvidia-smi for its GPUs, and a slurm spec's `plan` asks Slurm's read-only
    # clients for the nodes its sbatch/srun lines depend on (tfcluster's own probes, never a spec's command;
    # each named by its executable alone, with no word of the spec in the program name).
    own = ("nvidia-smi", "sinfo", "scontrol")
    started = [(argv, code, [p for p in procs if os.path.basename(str(p[1])) not in own])
               for argv, code, procs in ran]
    assert all(not procs for _argv, _code, procs in started), [s for s in started if s[2]]
    assert all(code in (0, 2) for _argv, code, _p in ran), [r for r in ran if r[1] not in (0, 2)]
    assert not (tmp_path / "PLANTED").exists()


def test_a_discovery_grandchild_that_leaves_the_group_and_holds_the_pipe_ends_at_the_timeout(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(DiscoveryError) as err:
        # setsid: the grandchild leaves the command's process group; it keeps stdout (the pipe).
        run_discovery(f"setsid sh -c 'echo $$ > {pidfile}.new && mv {pidfile}.new {pidfile}; exec sleep 60' & "
                      f"while [ ! -s {pidfile} ]; do sleep 0.05; done; echo h1 10.0.0.1", 3, tmp_path)
    took = time.monotonic() - started
    assert "no answer within 3 s (discovery.timeout)" in str(err.value)
    assert took < 6, took  # (the timeout, not the grandchild's 60 s)
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, what="the grandchild's pid"))

    def gone() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().split(") ")[1][0] in "ZX"
        except OSError:
            return True

    wait_for(gone, 5, what=f"grandchild {pid} ended")


def test_a_command_that_exits_leaves_no_background_child(tmp_path):
    pidfile = tmp_path / "child.pid"
    # (the command waits for its child's pid: once it exits, the child is killed with its group)
    hosts = run_discovery(f"sh -c 'echo $$ > {pidfile}.new && mv {pidfile}.new {pidfile}; exec sleep 60' "
                          f">/dev/null 2>&1 & while [ ! -s {pidfile} ]; do sleep 0.05; done; echo h1 10.0.0.1", 20,
                          tmp_path)
    assert [h.name for h in hosts] == ["h1"]
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 5, what="the child's pid"))
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX",
             5, what=f"background child {pid} ended with its group")
