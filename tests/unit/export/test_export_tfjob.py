"""`tfcluster export --to tfjob`: the generated TFJob for the demo, the PSS example and an evaluator
spec, checked field by field and against the vendored CRD schema + webhook rules; and broken TFJobs
fed to the validator, to show it catches each rule."""

from __future__ import annotations

import copy

import pytest
import yaml

from launcher.cli.main import main
from launcher.export.tfjob import tfjob_dict
from launcher.export.validate import tfjob_schema, validate_tfjob
from launcher.loader.load import load_spec
from tests.support.readme import docs_block
from tests.support.specs import spec_file
from tests.support.export_golden import DEMO, DEMO_ENV, PSS
EVAL = """\
name: mwms-eval
strategy: multi_worker_mirrored
entrypoint: python -m worker --epochs 2
tasks: {worker: 2, evaluator: 1}
env: {DATA: "$(HOME)/data"}
restart: {max_restarts: 3, permanent_exit_codes: []}
watchdog: {stop_grace: 2.5}
state: {dir: gs://bucket/mwms}
kubernetes:
  namespace: training
  ttl_seconds_after_finished: 600
  active_deadline_seconds: 7200
  resources:
    default: {cpu: 2, memory: 4Gi}
    worker: {cpu: 500m, gpus: 1}
"""


def _container(doc: dict, rtype: str) -> dict:
    return doc["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]


def _env(container: dict) -> dict:
    return {e["name"]: e["value"] for e in container["env"]}


def test_demo_golden():
    doc = tfjob_dict(load_spec(DEMO))
    assert validate_tfjob(doc) == []
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "TFJob"
    assert doc["metadata"] == {"name": "demo", "namespace": "default",
                               "labels": {"app.kubernetes.io/managed-by": "tfcluster"}}
    # No chief under MWMS: the job succeeds when all workers do; pods go when it ends.
    assert doc["spec"]["successPolicy"] == "AllWorkers"
    assert doc["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 2}
    assert list(doc["spec"]["tfReplicaSpecs"]) == ["Worker"]
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["restartPolicy"] == "ExitCode"  # max_restarts 2 with the default permanent codes 1-127
    pod = worker["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 5
    assert pod["containers"] == [{
        "name": "tensorflow",
        "image": "tfcluster-worker:latest",
        "command": ["tfcluster-worker"],
        "args": ["--epochs", "3"],
        "env": DEMO_ENV,
        "ports": [{"name": "tfjob-port", "containerPort": 23456}],
    }]


def test_pss_example_replica_types_and_policies():
    doc = tfjob_dict(load_spec(PSS))
    assert validate_tfjob(doc) == []
    replicas = doc["spec"]["tfReplicaSpecs"]
    assert {t: r["replicas"] for t, r in replicas.items()} == {"Chief": 1, "Worker": 2, "PS": 1, "Evaluator": 1}
    assert {r["restartPolicy"] for r in replicas.values()} == {"ExitCode"}
    assert "successPolicy" not in doc["spec"]  # default: the chief decides
    assert doc["spec"]["runPolicy"]["cleanPodPolicy"] == "All"  # PS pods do not outlive the chief
    for rtype in replicas:
        env = _env(_container(doc, rtype))
        assert "TF_CONFIG" not in env and "TFCLUSTER_TASK" not in env  # the operator sets TF_CONFIG
        assert env["TFCLUSTER_STRATEGY"] == "parameter_server"
        assert _container(doc, rtype)["ports"] == [{"name": "tfjob-port", "containerPort": 23476}]


def test_evaluator_spec_resources_restart_env_and_options(tmp_path):
    doc = tfjob_dict(load_spec(spec_file(tmp_path, EVAL)), image="gcr.io/p/worker:7")
    assert validate_tfjob(doc) == []
    assert doc["metadata"]["namespace"] == "training"
    assert doc["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 3,
                                        "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 7200}
    replicas = doc["spec"]["tfReplicaSpecs"]
    assert list(replicas) == ["Worker", "Evaluator"]
    assert {r["restartPolicy"] for r in replicas.values()} == {"OnFailure"}  # permanent_exit_codes: []
    worker, evaluator = _container(doc, "Worker"), _container(doc, "Evaluator")
    # The worker's own keys override default's; gpus go in limits only.
    assert worker["resources"] == {"limits": {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 1},
                                   "requests": {"cpu": "500m", "memory": "4Gi"}}
    assert evaluator["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    assert worker["image"] == evaluator["image"] == "gcr.io/p/worker:7"
    env = _env(worker)
    assert env["DATA"] == "$$(HOME)/data"  # Kubernetes would expand $(HOME)
    assert env["TFCLUSTER_STATE_DIR"] == "gs://bucket/mwms"
    assert replicas["Worker"]["template"]["spec"]["terminationGracePeriodSeconds"] == 3  # ceil(2.5)


def test_max_restarts_zero_is_never(tmp_path):
    text = EVAL.replace("restart: {max_restarts: 3, permanent_exit_codes: []}", "restart: {max_restarts: 0}")
    doc = tfjob_dict(load_spec(spec_file(tmp_path, text)))
    assert {r["restartPolicy"] for r in doc["spec"]["tfReplicaSpecs"].values()} == {"Never"}
    assert doc["spec"]["runPolicy"]["backoffLimit"] == 0


def test_cli_writes_beside_the_spec_with_header(tmp_path, capsys):
    spec = spec_file(tmp_path, DEMO.read_text())
    assert main(["export", str(spec), "--to", "tfjob"]) == 0
    out = tmp_path / "demo.tfjob.yaml"
    text = out.read_text()
    assert text.startswith("# Generated by `tfcluster export` from cluster.yaml (--to tfjob)")
    assert "# Submit: kubectl apply -f demo.tfjob.yaml" in text
    assert "not run here" in text
    assert validate_tfjob(yaml.safe_load(text)) == []
    assert "&id" not in text  # every replica has its own env list, no YAML anchors
    err = capsys.readouterr().err
    assert "validated against the TFJob CRD schema" in err and f"wrote {out}" in err
    assert main(["export", str(spec), "--to", "tfjob", "--image", "other:2"]) == 0  # our own file: rewritten
    assert _container(yaml.safe_load(out.read_text()), "Worker")["image"] == "other:2"


def test_cli_stdout(capsys):
    assert main(["export", str(DEMO), "--to", "tfjob", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["metadata"]["name"] == "demo"


def test_cli_refuses_a_foreign_file_with_exit_1(tmp_path, capsys):
    spec = spec_file(tmp_path, DEMO.read_text())
    mine = tmp_path / "mine.yaml"
    mine.write_text("kind: Something\n")
    assert main(["export", str(spec), "--to", "tfjob", "-o", str(mine)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was not generated by tfcluster" in err[0]
    assert mine.read_text() == "kind: Something\n"


# ---------------------------------------------------------------- the validator catches each rule


@pytest.fixture(scope="module")
def good() -> dict:
    doc = tfjob_dict(load_spec(PSS))
    assert validate_tfjob(doc) == []
    return doc


def _broken(good: dict, change) -> list[str]:
    doc = copy.deepcopy(good)
    change(doc)
    return validate_tfjob(doc)


def _replica(doc: dict, rtype: str = "Worker") -> dict:
    return doc["spec"]["tfReplicaSpecs"][rtype]


def _set(path: str, value):
    def change(doc):
        node = doc
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        node[keys[-1]] = value
    return change


BROKEN = [
    # (what, change, expected text in one problem)
    ("restartPolicy enum (schema misses it)", _set("spec.tfReplicaSpecs.Worker.restartPolicy", "Sometimes"),
     "spec.tfReplicaSpecs.Worker.restartPolicy: 'Sometimes' is not one of"),
    ("container name", _set("spec.tfReplicaSpecs.Worker.template.spec.containers.0.name", "main"),
     "no container named 'tensorflow'"),
    ("port name", _set("spec.tfReplicaSpecs.PS.template.spec.containers.0.ports.0.name", "grpc"),
     "needs exactly one port named 'tfjob-port'"),
    ("missing image", _set("spec.tfReplicaSpecs.Chief.template.spec.containers.0.image", ""),
     "containers[0].image: required"),
    ("two chief types", _set("spec.tfReplicaSpecs.Master", {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "x", "ports": [{"name": "tfjob-port", "containerPort": 1}]}]}}}),
     "at most one Chief or Master"),
    ("two chief replicas", _set("spec.tfReplicaSpecs.Chief.replicas", 2), "at most one chief"),
    ("DNS-1035 name", _set("metadata.name", "PSS_demo"), "metadata.name: 'PSS_demo' is not a DNS-1035 label"),
    ("name starting with a digit", _set("metadata.name", "1demo"), "not a DNS-1035 label"),
    ("unknown field in the spec", _set("spec.tfReplicaSpecs.Worker.replica", 2),
     "spec.tfReplicaSpecs.Worker.replica: unknown field"),
    ("unknown field in the container", _set("spec.tfReplicaSpecs.Worker.template.spec.containers.0.enviroment", []),
     "containers[0].enviroment: unknown field"),
    ("unknown metadata field", _set("metadata.nam", "x"), "metadata.nam: unknown field"),
    ("unknown replica type", _set("spec.tfReplicaSpecs.Evaluators", {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "tensorflow", "image": "x", "ports": [{"name": "tfjob-port", "containerPort": 1}]}]}}}),
     "spec.tfReplicaSpecs.Evaluators: unknown replica type"),
    ("wrong type (schema)", _set("spec.tfReplicaSpecs.Worker.replicas", "2"), "'2' is not of type 'integer'"),
    ("bad quantity (schema)", _set("spec.tfReplicaSpecs.Worker.template.spec.containers.0.resources",
                                   {"limits": {"cpu": "2 cores"}}), "does not match"),
    ("cleanPodPolicy enum", _set("spec.runPolicy.cleanPodPolicy", "Everything"), "cleanPodPolicy: 'Everything'"),
    ("successPolicy enum", _set("spec.successPolicy", "AnyWorker"), "spec.successPolicy: 'AnyWorker'"),
    ("TF_CONFIG set", lambda d: _replica(d)["template"]["spec"]["containers"][0]["env"].append(
        {"name": "TF_CONFIG", "value": "{}"}), "TF_CONFIG is set by the operator"),
    ("no containers", _set("spec.tfReplicaSpecs.Worker.template.spec.containers", []), "containers: required"),
    ("no replica specs", _set("spec.tfReplicaSpecs", {}), "spec.tfReplicaSpecs: required"),
    ("wrong apiVersion", _set("apiVersion", "kubeflow.org/v1beta2"), "must be kubeflow.org/v1/TFJob"),
]


@pytest.mark.parametrize("what,change,expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_validator_rejects(good, what, change, expected):
    problems = _broken(good, change)
    assert any(expected in p for p in problems), problems


def test_schema_alone_misses_what_the_webhook_rules_catch(good):
    """The reason for the extra rules: jsonschema with the CRD accepts these broken manifests."""
    import jsonschema

    schema_only = jsonschema.Draft4Validator(tfjob_schema())
    by_name = {what: (change, expected) for what, change, expected in BROKEN}
    for what in ("restartPolicy enum (schema misses it)", "container name", "unknown field in the spec"):
        change, expected = by_name[what]
        doc = copy.deepcopy(good)
        change(doc)
        assert list(schema_only.iter_errors(doc)) == [], what
        problems = validate_tfjob(doc)
        assert len(problems) == 1 and expected in problems[0], (what, problems)  # that problem, and only it



def test_the_docs_show_the_generated_demo(capsys):
    assert main(["export", str(DEMO), "--to", "tfjob", "-o", "-"]) == 0
    assert docs_block("export.md", "The demo (`tfcluster export\ncluster.yaml --to tfjob`)") == capsys.readouterr().out


# ---------------------------------------------------------------- GPUs follow the spec's GPUs per task

GPU_PSS = """\
name: pss-gpu
strategy: parameter_server
entrypoint: python -m worker
tasks: {chief: 1, worker: 2, ps: 2}
devices: {gpus_per_task: 2, gpu_memory: growth}
kubernetes:
  resources:
    default: {cpu: 4, memory: 8Gi, gpus: 1}
"""


def test_gpus_per_task_sets_each_replica_types_gpu_limit_and_none_for_ps_and_coordinator(tmp_path):
    doc = tfjob_dict(load_spec(spec_file(tmp_path, GPU_PSS)))
    assert validate_tfjob(doc) == []
    limits = {t: _container(doc, t)["resources"]["limits"] for t in ("Chief", "Worker", "PS")}
    # gpus_per_task 2 for the workers; the ps and the PSS chief get none, default's gpus: 1 notwithstanding.
    assert limits == {"Chief": {"cpu": "4", "memory": "8Gi"}, "Worker": {"cpu": "4", "memory": "8Gi",
                                                                           "nvidia.com/gpu": 2},
                      "PS": {"cpu": "4", "memory": "8Gi"}}
    envs = {t: _env(_container(doc, t)) for t in ("Chief", "Worker", "PS")}
    # A replica sees only its own GPUs: no plan-made CUDA_VISIBLE_DEVICES or request marker for it; the
    # GPU-less types say -1 (a CUDA image's NVIDIA_VISIBLE_DEVICES=all would show them the node's GPUs).
    assert "CUDA_VISIBLE_DEVICES" not in envs["Worker"] and envs["Chief"]["CUDA_VISIBLE_DEVICES"] == "-1"
    assert envs["PS"]["CUDA_VISIBLE_DEVICES"] == "-1"
    assert all("TFCLUSTER_GPUS" not in e and e["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" for e in envs.values())


def test_a_groups_gpus_and_a_types_own_resources_entry_win(tmp_path):
    text = (GPU_PSS.replace("ps: 2}", "ps: {count: 2, gpus: 1}}")
            + "    worker: {gpus: 4}\n")
    doc = tfjob_dict(load_spec(spec_file(tmp_path, text)))
    assert validate_tfjob(doc) == []
    assert _container(doc, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == 4  # its own entry
    assert _container(doc, "PS")["resources"]["limits"]["nvidia.com/gpu"] == 1  # tasks.ps.gpus
    assert "CUDA_VISIBLE_DEVICES" not in _env(_container(doc, "PS"))
    # gpus_per_task auto (the default) says no count: default's gpus applies to the GPU roles only.
    doc = tfjob_dict(load_spec(spec_file(tmp_path, GPU_PSS.replace("gpus_per_task: 2, ", ""))))
    assert _container(doc, "Worker")["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in _container(doc, "PS")["resources"]["limits"]


def test_without_gpu_keys_the_demo_has_no_gpu_limit_or_gpu_env():
    doc = tfjob_dict(load_spec(DEMO))
    container = _container(doc, "Worker")
    assert "resources" not in container
    assert not {"CUDA_VISIBLE_DEVICES", "TFCLUSTER_GPUS", "TF_FORCE_GPU_ALLOW_GROWTH"} & set(_env(container))
