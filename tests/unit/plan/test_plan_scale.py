"""Plans that grow with n: the cluster is held once and shared by the plan's
tasks, each task's TF_CONFIG is made when asked for, and still byte for byte what it was when
every task held its own copy (tests/unit/plan/data/plan_goldens.json, written by the plan before the
change, for the specs of plan_goldens_specs.py)."""

from __future__ import annotations

from launcher import __version__

import json
import textwrap
from pathlib import Path

import pytest

from launcher.app.up import plan_for
from launcher.loader.load import parse_spec
from tests.unit.plan.plan_goldens_specs import SPECS

GOLDENS = json.loads((Path(__file__).parent / "data" / "plan_goldens.json").read_text())


def plan_of(text: str):
    return plan_for(parse_spec(textwrap.dedent(text)))


# Each task's GPUs came later (launcher/plan/gpus.py: its own CUDA_VISIBLE_DEVICES, or the request the
# backend completes where it starts; test_gpus.py checks those): compared without them.
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TFCLUSTER_GPUS", "TF_FORCE_GPU_ALLOW_GROWTH")


def no_gpu(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in GPU_VARS}


def no_gpu_json(data: dict) -> dict:
    return {**data, "tasks": [{**t, "env": no_gpu(t["env"])} for t in data["tasks"]]}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_tasks_tf_config_and_env_are_unchanged(name):
    plan = plan_of(SPECS[name])
    golden = GOLDENS[name]["tasks"]
    assert set(golden) == set(plan.keys)
    for task in plan.tasks:
        assert task.tf_config_json == golden[task.key]["tf_config_json"], task.key
        assert no_gpu(task.env_dict) == no_gpu(golden[task.key]["env"]), task.key
        assert list(task.env_dict) == sorted(task.env_dict), task.key  # still sorted
        assert json.loads(task.tf_config_json) == task.tf_config


@pytest.mark.parametrize("name", sorted(SPECS))
def test_to_json_is_the_full_shape_as_before(name):
    assert no_gpu_json(plan_of(SPECS[name]).to_json()) == no_gpu_json(GOLDENS[name]["to_json"])


@pytest.mark.parametrize("name", sorted(SPECS))
def test_compact_json_expands_to_the_full_shape(name):
    from tests.support.planjson import expand_plan_json

    plan = plan_of(SPECS[name])
    compact = plan.to_compact_json()
    assert compact["format"] == "compact" and all("tf_config" not in t and "env" not in t for t in compact["tasks"])
    assert expand_plan_json(compact) == plan.to_json()
    assert expand_plan_json(plan.to_json()) == plan.to_json()  # a full one (older records) stays as it is


def test_the_tasks_share_one_cluster():
    plan = plan_of(SPECS["ssh_pss_explicit_ports"])
    assert plan.cluster is not None and all(t.cluster is plan.cluster for t in plan.tasks)
    # the tasks whose env is the same share one tuple (here they differ by their GPUs: the ps and
    # the chief none, each worker its request by its place on its host)
    assert len({id(t.base_env) for t in plan.tasks}) == len({t.base_env for t in plan.tasks})
    assert plan_of(SPECS["mirrored_single_host"]).cluster is None


def _ssh_spec(n: int, per_host: int = 4) -> str:
    hosts = "\n".join(f"  - {{name: h{i}, address: 10.0.{i // 256}.{i % 256}}}" for i in range(n // per_host))
    return (f"name: scale\nstrategy: multi_worker_mirrored\nbackend: ssh\nentrypoint: python -m worker\n"
            f"tasks: {{chief: 1, worker: {n - 1}}}\nhosts:\n{hosts}\n")


def test_compact_plan_json_grows_linearly():
    """The compact JSON (plan.json, plan --json=compact) of 1,000 tasks is about 10x that of 100
    tasks (the full shape is about 100x: each task holds the whole cluster)."""
    def size(n, compact):
        plan = plan_for(parse_spec(_ssh_spec(n)))
        return len(json.dumps(plan.to_compact_json() if compact else plan.to_json()))

    small, big = size(100, True), size(1000, True)
    assert 8 * small <= big <= 12 * small, (small, big)
    assert size(1000, False) > 60 * size(100, False)  # what it replaces: O(n²)


def test_rendered_plan_grows_linearly():
    from launcher.ui.plantext import render_plan

    small = len(render_plan(plan_for(parse_spec(_ssh_spec(100)))))
    big = len(render_plan(plan_for(parse_spec(_ssh_spec(1000)))))
    assert 8 * small <= big <= 12 * small, (small, big)


def with_format(text: str) -> str:
    """A golden ``plan --json`` text with the CLI's ``"format": 1`` and ``"tfcluster"`` (its version)
    first, as every --json output starts."""
    assert text.startswith("{\n")
    return f'{{\n  "format": 1,\n  "tfcluster": "{__version__}",\n' + text[2:]


def test_plan_json_default_shape_is_unchanged(tmp_path, capsys):
    from launcher.cli.main import main

    for name, text in SPECS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        assert main(["plan", str(path), "--json"]) == 0
        out = capsys.readouterr().out
        assert out == json.dumps(json.loads(out), indent=2) + "\n", name  # the same layout
        assert no_gpu_json(json.loads(out)) == no_gpu_json(json.loads(with_format(GOLDENS[name]["plan_json_text"]))), name


def test_plan_json_compact(tmp_path, capsys):
    from launcher.cli.main import main
    from tests.support.planjson import expand_plan_json

    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(SPECS["local_mwms_chief_evaluator"]))
    assert main(["plan", str(path), "--json=compact"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["format"], data["shape"], data.pop("tfcluster")) == (1, "compact", __version__)
    assert data["cluster"] == {"chief": ["localhost:3000"],
                               "worker": ["localhost:3001", "localhost:3002", "localhost:3003"]}
    assert data["env"]["API_TOKEN"] == "***" and "TF_CONFIG" not in data["env"]
    assert data["tasks"][1] == {"type": "worker", "index": 0, "host": "localhost", "address": "localhost",
                                "port": 3001}
    assert json.dumps(expand_plan_json(data), indent=2) + "\n" == GOLDENS["local_mwms_chief_evaluator"]["plan_json_text"]
    assert main(["plan", str(path), "--json=full"]) == 0
    assert capsys.readouterr().out == with_format(GOLDENS["local_mwms_chief_evaluator"]["plan_json_text"])

def test_plan_json_flag_forms(tmp_path, capsys, monkeypatch):
    """--json before FILE still works; a form other than full/compact is one line, exit 2; without
    FILE, ./cluster.yaml is the spec, and with none there the error says how to give one."""
    from launcher.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(SPECS["local_mwms_chief_evaluator"]))
    assert main(["plan", "--json", str(path)]) == 0
    assert capsys.readouterr().out == with_format(GOLDENS["local_mwms_chief_evaluator"]["plan_json_text"])
    assert main(["plan", str(path), "--json=small"]) == 2
    assert "argument --json: invalid choice: 'small' (choose from 'full', 'compact')" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TFCLUSTER_FILE", raising=False)
    assert main(["plan", "--json"]) == 2
    assert "no FILE given and no ./cluster.yaml in " in capsys.readouterr().err
    (tmp_path / "cluster.yaml").write_text(path.read_text())
    assert main(["plan", "--json"]) == 0
    assert capsys.readouterr().out == with_format(GOLDENS["local_mwms_chief_evaluator"]["plan_json_text"])


def test_the_records_plan_json_holds_the_cluster_once_and_reads_back(tmp_path):
    """plan.json is the compact shape, secrets redacted; status reads it, and still reads a record
    written before (every task with its whole TF_CONFIG)."""
    from tests.support.planjson import expand_plan_json
    from launcher.record.writer import RunRecord
    from launcher.record.status import load_run

    plan = plan_of(SPECS["local_mwms_chief_evaluator"])
    record = RunRecord(tmp_path / "runs", plan).create()
    record.close()
    path = record.dir / "plan.json"
    data = json.loads(path.read_text())
    assert data["format"] == "compact" and data["cluster"] == plan.cluster.to_json()
    assert "s3cret" not in path.read_text() and data["env"]["API_TOKEN"] == "***"
    full = GOLDENS["local_mwms_chief_evaluator"]["to_json"]
    redacted = {**full, "tasks": [{**t, "env": {**t["env"], "API_TOKEN": "***"}} for t in full["tasks"]]}
    assert expand_plan_json(data) == redacted
    rows = lambda: [(t.key, t.host) for t in load_run(record.dir, progress=False).tasks]  # noqa: E731
    expected = [(t.key, t.host) for t in plan.tasks]
    assert rows() == expected
    path.write_text(json.dumps(redacted, indent=2))  # a record from before: the full shape
    assert rows() == expected
