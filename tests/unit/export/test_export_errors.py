"""`tfcluster export`: a spec the engine cannot express fails with one line naming the key (exit 2),
for both targets; bad kubernetes:/vertex: options are spec errors; nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.cli.main import main
from tests.support.specs import BASE

HOSTS = """\
name: demo
strategy: multi_worker_mirrored
backend: ssh
entrypoint: python -m worker
hosts:
  - {name: h1, ssh: me@10.0.0.1}
  - {name: h2, ssh: me@10.0.0.2}
tasks:
  worker: {count: 2, hosts: [h1, h2]}
"""

# (case, spec text, targets, the one line must contain)
CASES = [
    ("hosts pinning", HOSTS, ("tfjob", "jobset", "vertex"), ":5: hosts: "),
    ("ssh backend options", BASE + "ssh:\n  setup: ['pip install -r requirements.txt']\n", ("tfjob", "jobset", "vertex"),
     ":6: ssh: options of a backend tfcluster runs itself"),
    ("per-task ports", BASE.replace("  worker: 2\n", "  worker: {count: 2, ports: [5000, 5001]}\n"),
     ("tfjob", "jobset", "vertex"), ":5: tasks.worker.ports: "),
    ("warm standby", BASE + "restart: {max_restarts: 1, warm_standby: true}\n", ("tfjob", "jobset", "vertex"),
     ":6: restart.warm_standby: "),
    ("state dir on hosts", BASE + "state: {dir: /nfs/state}\n", ("tfjob", "jobset", "vertex"), ":6: state.dir: '/nfs/state'"),
    ("state sync copy", BASE + "state: {sync: copy}\n", ("tfjob", "jobset", "vertex"), ":6: state.sync: copy"),
    ("gpu indices", BASE + "devices: {gpus: [0, 2]}\n", ("tfjob", "jobset", "vertex"), ":6: devices.gpus: [0, 2]"),
    ("bind mounts", BASE + "docker: {volumes: ['./data:/data']}\n", ("tfjob", "jobset", "vertex"), ":6: docker.volumes: "),
    ("docker user", BASE + "docker: {user: '1000'}\n", ("tfjob", "jobset", "vertex"), ":6: docker.user: "),
    ("tpu", "name: t\nstrategy: tpu\nentrypoint: python -m worker\ntpu: {name: my-tpu}\n", ("tfjob", "jobset", "vertex"),
     ":2: strategy: tpu: "),
    ("exit codes TFJob cannot express", BASE + "restart: {max_restarts: 2, permanent_exit_codes: [1, 2]}\n",
     ("tfjob",), ":6: restart.permanent_exit_codes: "),
    ("name Kubernetes refuses", BASE.replace("name: demo", "name: My_Run"), ("tfjob", "jobset"),
     ":1: name: 'My_Run' cannot name a "),
]


@pytest.mark.parametrize("case,text,targets,expected", CASES, ids=[c[0] for c in CASES])
def test_inexpressible_spec_is_one_line_exit_2(tmp_path, capsys, case, text, targets, expected):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(text)
    assert main(["validate", str(spec)]) == 0  # a good spec for `tfcluster up`...
    capsys.readouterr()
    for target in targets:
        out = tmp_path / f"out.{target}.yaml"
        assert main(["export", str(spec), "--to", target, "-o", str(out)]) == 2, target
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith("tfcluster: error: ") and "cluster.yaml" in err[0] and expected in err[0], err[0]
        assert not out.exists() and not out.with_suffix(".json").exists()


def test_vertex_takes_exit_codes_and_names_tfjob_refuses(tmp_path, capsys):
    """What only TFJob cannot express exports to Vertex (with a comment saying what is not mapped)."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE.replace("name: demo", "name: My_Run") + "restart: {max_restarts: 2, permanent_exit_codes: [1]}\n")
    assert main(["export", str(spec), "--to", "vertex", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert "permanent_exit_codes are not mapped" in out


@pytest.mark.parametrize("block,expected", [
    ("kubernetes: {resources: {worker: {cpu: 2 cores}}}", "kubernetes.resources.worker.cpu: '2 cores' is not a Kubernetes quantity"),
    ("kubernetes: {resources: {workers: {cpu: 2}}}", "kubernetes.resources.workers: unknown key 'workers' (did you mean 'worker'?)"),
    ("kubernetes: {namespace: Team_A}", "kubernetes.namespace: 'Team_A' is not a DNS-1123 label"),
    ("kubernetes: {resources: {worker: {gpus: -1}}}", "kubernetes.resources.worker.gpus: must be a whole number >= 0"),
    ("vertex: {machines: {default: {machinetype: n1-standard-4}}}", "vertex.machines.default.machinetype: unknown key"),
    ("vertex: {base_output_directory: /tmp/out}", "vertex.base_output_directory: '/tmp/out' is not a gs:// URL"),
])
def test_bad_options_are_spec_errors(tmp_path, capsys, block, expected):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + block + "\n")
    assert main(["export", str(spec), "--to", "tfjob", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cluster.yaml:6: {expected}" in err[0], err


def test_usage_errors(tmp_path, capsys):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE)
    assert main(["export", str(spec), "--to", "slurm"]) == 2
    assert "invalid choice: 'slurm'" in capsys.readouterr().err
    assert main(["export", str(spec)]) == 2
    assert "--to" in capsys.readouterr().err
    assert main(["export", str(spec), "--to", "tfjob", "--image", "Bad Image"]) == 2
    assert "--image: 'Bad Image'" in capsys.readouterr().err
    assert main(["export", str(spec), "--to", "vertex", "-o", str(tmp_path / "job.json")]) == 2
    assert "give the .yaml path" in capsys.readouterr().err
    assert main(["export", str(spec), "--to", "tfjob", "-o", str(tmp_path / "missing" / "x.yaml")]) == 1
    assert "does not exist; create it first" in capsys.readouterr().err


def test_backend_is_not_exported_and_needs_no_hosts(tmp_path, capsys):
    """backend: docker (like compose) exports; the image comes from docker.image."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE.replace("tasks:", "backend: docker\ndocker: {image: 'registry.example/w:1'}\ntasks:"))
    assert main(["export", str(spec), "--to", "tfjob", "-o", "-"]) == 0
    assert "image: registry.example/w:1" in capsys.readouterr().out


def test_problems_come_in_file_order(tmp_path, capsys):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + "docker: {volumes: ['./d:/d']}\nrestart: {max_restarts: 1, warm_standby: true}\n")
    assert main(["export", str(spec), "--to", "tfjob", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[3] for line in err] == ["6", "7"], err


def test_accelerator_count_without_type(tmp_path, capsys):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + "vertex: {machines: {worker: {accelerator_count: 2}}}\n")
    assert main(["export", str(spec), "--to", "vertex", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "vertex.machines.worker.accelerator_count: 2 accelerators of no type" in err[0]


def test_export_never_imports_tensorflow():
    import subprocess
    import sys

    code = ("import sys; from launcher.cli.main import main; "
            "rc = main(['export', 'cluster.yaml', '--to', 'vertex', '-o', '-']); "
            "sys.exit(rc or (3 if 'tensorflow' in sys.modules else 0))")
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_any_other_backend_options_block_is_refused(tmp_path):
    """A backend's options block added to the spec later (e.g. ``slurm:``) is refused without export
    knowing its name: spec_model() declares each backend's block NOT_EXPORTED unless the backend says
    the export reads it (docker)."""
    from typing import Annotated

    from launcher.export.common import inexpressible
    from launcher.loader.load import LoadedSpec, spec_model
    from launcher.spec.model import NOT_EXPORTED

    class WithSlurm(spec_model()):  # the Spec class parse_spec builds, with the registered backends' blocks
        slurm: Annotated[dict, NOT_EXPORTED] = {}

    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + "slurm:\n  partition: gpu\n")
    spec = WithSlurm.model_validate(yaml.safe_load(path.read_text()))
    for target in ("tfjob", "jobset", "vertex"):
        problems = inexpressible(LoadedSpec(spec, path), target)
        assert len(problems) == 1 and ":6: slurm: options of a backend tfcluster runs itself" in problems[0]
        assert "export a spec without slurm:" in problems[0]


def test_every_spec_key_declares_what_export_does_with_it():
    """The export's key list is the spec model's: each top-level key (the backends' blocks and
    export's own included) carries an Export verdict, so a new key cannot be forgotten by the export."""
    from launcher.loader.load import spec_model
    from launcher.spec.model import EXPORTED, LOCAL_ONLY, NOT_EXPORTED, export_verdicts

    verdicts = export_verdicts(spec_model())
    assert [k for k, v in verdicts.items() if v is None] == []
    assert verdicts["hosts"] == NOT_EXPORTED and verdicts["run_dir"] == LOCAL_ONLY and verdicts["tasks"] == EXPORTED
    assert verdicts["docker"] == EXPORTED and verdicts["ssh"] == NOT_EXPORTED and verdicts["vertex"] == EXPORTED


@pytest.mark.parametrize("verdict", ["none", "exported", "local only"])
def test_a_new_spec_key_is_noticed_by_the_export(tmp_path, verdict):
    """A dummy key added to a copy of the model: declared exported or local only, the export takes a
    spec that sets it; declared with no verdict, the export refuses it by name (never drops it silently)."""
    from typing import Annotated

    from launcher.export.common import inexpressible
    from launcher.loader.load import LoadedSpec, spec_model
    from launcher.spec.model import Export, export_verdicts

    base = spec_model()
    if verdict == "none":
        class WithDummy(base):
            dummy: int = 0
    else:
        class WithDummy(base):  # type: ignore[no-redef]
            dummy: Annotated[int, Export(verdict)] = 0

    assert export_verdicts(WithDummy)["dummy"] == (None if verdict == "none" else verdict)
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE + "dummy: 3\n")
    spec = WithDummy.model_validate(yaml.safe_load(path.read_text()))
    for target in ("tfjob", "jobset", "vertex"):
        problems = inexpressible(LoadedSpec(spec, path), target)
        if verdict == "none":
            assert len(problems) == 1 and ":6: dummy: tfcluster export does not know" in problems[0], problems
            assert "export a spec without dummy:" in problems[0]
        else:
            assert problems == []


def test_collective_settings_reach_the_exported_environment(tmp_path, capsys):
    """collective: becomes TFCLUSTER_COLLECTIVE* in every task's environment, which the export writes."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + "collective: {implementation: ring, timeout: 30}\n")
    for target in ("tfjob", "jobset", "vertex"):
        assert main(["export", str(spec), "--to", target, "-o", "-"]) == 0
        out = capsys.readouterr().out
        assert "TFCLUSTER_COLLECTIVE" in out and "RING" in out.upper() and "30" in out, out


def test_the_docs_options_example_exports_to_both(tmp_path, capsys):
    from tests.support.readme import docs_block

    block = docs_block("export.md", "Options, both keyed like `tasks:`")
    assert block.startswith("kubernetes:") and "vertex:" in block
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + block)
    for target in ("tfjob", "jobset", "vertex"):
        assert main(["export", str(spec), "--to", target, "-o", "-"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "nvidia.com/gpu: 1" in out and "acceleratorType: NVIDIA_TESLA_T4" in out
