"""`tfcluster export --to vertex`: the CustomJob (JSON) and CustomJobSpec (YAML for gcloud) for the
demo, the PSS example and an evaluator spec, validated with Vertex's own API types
(google-cloud-aiplatform, the [export] extra) plus tfcluster's pool rules; and broken jobs fed to
the validators, to show they catch each rule."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from launcher.cli import main
from launcher.export import write as export_write
from launcher.export.validate import aiplatform_types, validate_custom_job, validate_vertex_spec
from launcher.export.vertex import custom_job_dict
from launcher.spec import load_spec
from tests.prereq import require
from tests.readme import readme_block

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "cluster.yaml"
PSS = ROOT / "examples" / "parameter_server.yaml"
EVAL = """\
name: mwms-eval
strategy: multi_worker_mirrored
entrypoint: python -m worker --epochs 2
tasks: {worker: 3, evaluator: 1}
env: {DATA: gs://bucket/data}
restart: {max_restarts: 0}
vertex:
  base_output_directory: gs://bucket/out
  timeout: 3600
  machines:
    default: {machine_type: n1-standard-8, boot_disk_size_gb: 200}
    worker: {accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 2}
    evaluator: {machine_type: n1-standard-4}
"""


@pytest.fixture(scope="module")
def api():
    types = aiplatform_types()
    require(types is not None, "google-cloud-aiplatform is not installed (pip install -e '.[export]')")
    return types


def _write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _env(pool: dict) -> dict:
    return {e["name"]: e["value"] for e in pool["containerSpec"]["env"]}


def test_demo_golden(api):
    job = custom_job_dict(load_spec(DEMO))
    assert validate_custom_job(job, api) == [] and validate_vertex_spec(job["jobSpec"], api) == []
    assert job["displayName"] == "demo" and job["labels"] == {"generated-by": "tfcluster"}
    pools = job["jobSpec"]["workerPoolSpecs"]
    # Two MWMS workers: worker 0 is Vertex's primary replica (pool 0), the other one is pool 1.
    assert [p["replicaCount"] for p in pools] == [1, 1]
    assert pools[0] == {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": 1,
        "containerSpec": {
            "imageUri": "tfcluster-worker:latest",
            "command": ["python"],
            "args": ["-m", "worker", "--epochs", "3"],
            "env": [
                {"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "TFCLUSTER_NAME", "value": "demo"},
                {"name": "TFCLUSTER_RESTART_COUNT", "value": "0"},
                {"name": "TFCLUSTER_RUN_ID", "value": "export"},
                {"name": "TFCLUSTER_STATE_DIR", "value": "/tfcluster/state"},
                {"name": "TFCLUSTER_STRATEGY", "value": "multi_worker_mirrored"},
                {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                {"name": "TF_USE_LEGACY_KERAS", "value": "1"},
            ],
        },
    }
    assert pools[1]["containerSpec"] == pools[0]["containerSpec"]
    # MWMS cannot lose a worker: the whole job restarts with it.
    assert job["jobSpec"]["scheduling"] == {"restartJobOnWorkerRestart": True}


def test_pss_example_pool_order(api):
    job = custom_job_dict(load_spec(PSS))
    assert validate_custom_job(job, api) == []
    pools = job["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2, 1, 1]  # chief, workers, ps, evaluator
    assert job["jobSpec"]["scheduling"] == {"restartJobOnWorkerRestart": False}
    for pool in pools:
        env = _env(pool)
        assert "TF_CONFIG" not in env and "CLUSTER_SPEC" not in env and "TFCLUSTER_TASK" not in env
        assert env["TFCLUSTER_STRATEGY"] == "parameter_server"


def test_evaluator_spec_empty_ps_pool_machines_and_options(api, tmp_path):
    job = custom_job_dict(load_spec(_write(tmp_path, EVAL)), image="us-docker.pkg.dev/p/r/worker:3")
    assert validate_custom_job(job, api) == [] and validate_vertex_spec(job["jobSpec"], api) == []
    spec = job["jobSpec"]
    pools = spec["workerPoolSpecs"]
    assert pools[2] == {}  # no ps: an empty pool keeps the evaluator at position 3
    assert [p.get("replicaCount") for p in pools] == [1, 2, None, 1]
    gpu = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 2}
    assert pools[0]["machineSpec"] == pools[1]["machineSpec"] == gpu  # pool 0 is worker 0: the worker's machine
    assert pools[3]["machineSpec"] == {"machineType": "n1-standard-4"}
    assert pools[0]["diskSpec"] == pools[3]["diskSpec"] == {"bootDiskSizeGb": 200}
    assert {p["containerSpec"]["imageUri"] for p in pools if p} == {"us-docker.pkg.dev/p/r/worker:3"}
    assert _env(pools[3])["DATA"] == "gs://bucket/data"
    assert spec["scheduling"] == {"disableRetries": True, "timeout": "3600s"}  # max_restarts: 0
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://bucket/out"}


def test_cli_writes_yaml_for_gcloud_and_json_for_the_api(api, tmp_path, capsys):
    spec = _write(tmp_path, PSS.read_text(), "pss.yaml")
    assert main(["export", str(spec), "--to", "vertex"]) == 0
    text = (tmp_path / "pss-demo.vertex.yaml").read_text()
    assert text.startswith("# Generated by `tfcluster export` from pss.yaml (--to vertex)")
    assert "# Submit: gcloud ai custom-jobs create --region REGION --display-name pss-demo " \
           "--config pss-demo.vertex.yaml" in text
    assert "&id" not in text
    job_spec = yaml.safe_load(text)
    job = json.loads((tmp_path / "pss-demo.vertex.json").read_text())
    assert job["jobSpec"] == job_spec
    assert validate_vertex_spec(job_spec, api) == [] and validate_custom_job(job, api) == []
    assert "validated with google.cloud.aiplatform_v1" in capsys.readouterr().err
    assert main(["export", str(spec), "--to", "vertex"]) == 0  # both files are ours: rewritten


def test_cli_refuses_a_foreign_json_with_exit_1(tmp_path, capsys):
    spec = _write(tmp_path, DEMO.read_text())
    (tmp_path / "job.json").write_text('{"displayName": "mine"}\n')
    assert main(["export", str(spec), "--to", "vertex", "-o", str(tmp_path / "job.yaml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "job.json exists and was not generated by tfcluster" in err[0]
    assert not (tmp_path / "job.yaml").exists()  # nothing written when one file is refused
    assert (tmp_path / "job.json").read_text() == '{"displayName": "mine"}\n'


def test_without_aiplatform_the_export_works_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(export_write, "aiplatform_types", lambda: None)
    spec = _write(tmp_path, DEMO.read_text())
    assert main(["export", str(spec), "--to", "vertex", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["workerPoolSpecs"][0]["replicaCount"] == 1
    assert "skipped the Vertex API type check" in captured.err


def test_bad_accelerator_type_is_one_line_exit_2(api, tmp_path, capsys):
    text = EVAL.replace("NVIDIA_TESLA_T4", "NVIDIA_T4")
    spec = _write(tmp_path, text)
    assert main(["export", str(spec), "--to", "vertex", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "Invalid enum value NVIDIA_T4" in err[0] and "check the vertex: options" in err[0]


# ---------------------------------------------------------------- the validators catch each rule


@pytest.fixture(scope="module")
def good(api) -> dict:
    job = custom_job_dict(load_spec(PSS))
    assert validate_custom_job(job, api) == []
    return job


def _pool(job: dict, i: int) -> dict:
    return job["jobSpec"]["workerPoolSpecs"][i]


BROKEN = [
    ("unknown field", lambda j: _pool(j, 1)["containerSpec"].update(bogus=1), 'has no field named "bogus"'),
    ("bad enum", lambda j: _pool(j, 1)["machineSpec"].update(acceleratorType="GPU"), "Invalid enum value GPU"),
    ("bad type", lambda j: _pool(j, 1).update(replicaCount="two"), "replicaCount"),
    ("bad duration", lambda j: j["jobSpec"].update(scheduling={"timeout": "60"}), 'Duration must end with letter "s"'),
    ("chief pool with 2 replicas", lambda j: _pool(j, 0).update(replicaCount=2),
     "pool 0 (the primary replica, chief) must have exactly 1 replica"),
    ("empty chief pool", lambda j: j["jobSpec"]["workerPoolSpecs"].__setitem__(0, {}),
     "the primary replica's pool cannot be empty"),
    ("five pools", lambda j: j["jobSpec"]["workerPoolSpecs"].append({}), "5 pools; Vertex has 4"),
    ("no pools", lambda j: j["jobSpec"].update(workerPoolSpecs=[]), "workerPoolSpecs: required"),
    ("zero workers in a used pool", lambda j: _pool(j, 1).update(replicaCount=0), "a used pool needs 1 or more"),
    ("no machine type", lambda j: _pool(j, 2)["machineSpec"].pop("machineType"), "machineSpec.machineType: required"),
    ("no image", lambda j: _pool(j, 3)["containerSpec"].pop("imageUri"), "containerSpec.imageUri: required"),
    ("TF_CONFIG set", lambda j: _pool(j, 1)["containerSpec"]["env"].append({"name": "TF_CONFIG", "value": "{}"}),
     "TF_CONFIG is set by Vertex"),
    ("no display name", lambda j: j.pop("displayName"), "displayName: required"),
    ("bad label", lambda j: j.update(labels={"Team": "ML"}), "labels.Team"),
]


@pytest.mark.parametrize("what,change,expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_custom_job_validator_rejects(api, good, what, change, expected):
    job = copy.deepcopy(good)
    change(job)
    problems = validate_custom_job(job, api)
    assert any(expected in p for p in problems), problems


def test_gcloud_yaml_rejects_snake_case_keys_the_api_types_accept(api, good):
    spec = copy.deepcopy(good["jobSpec"])
    spec["workerPoolSpecs"][1]["container_spec"] = spec["workerPoolSpecs"][1].pop("containerSpec")
    # protobuf's JSON parser takes the original field names too, gcloud's --config does not.
    api.CustomJobSpec.from_json(json.dumps(spec), ignore_unknown_fields=False)
    problems = validate_vertex_spec(spec, api)
    assert any("workerPoolSpecs[1].container_spec: snake_case key" in p for p in problems), problems


def test_readme_shows_the_generated_demo(capsys):
    assert main(["export", str(DEMO), "--to", "vertex", "-o", "-"]) == 0
    assert readme_block("The demo (`tfcluster export cluster.yaml --to vertex`") == capsys.readouterr().out
