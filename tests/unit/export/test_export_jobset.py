"""`tfcluster export --to jobset`: the JobSet for the demo (3 workers) and a ParameterServer spec,
checked against the vendored JobSet CRD schema and webhook rules; every pod started as Kubernetes
would start it (its command and args as a real process, its env with the Secret's values and
JOB_COMPLETION_INDEX) sees the TF_CONFIG the plan gives its task, with JobSet hostnames; broken
JobSets fed to the validator, to show it catches each rule."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.cli.main import main
from launcher.export.common import export_plan
from launcher.export.jobset import POD_HELPER, TINI, jobset_dict
from launcher.export.validate import jobset_schema, validate_jobset
from launcher.loader.load import load_spec
from launcher.remote import HERE as REMOTE_DIR
from tests.support.export_golden import DEMO, ROOT
from tests.support.prereq import require_tool
from tests.support.specs import spec_file

DEMO3 = DEMO.read_text().replace("  worker: 2\n", "  worker: 3\n")
PSS = """\
name: pss
strategy: parameter_server
entrypoint: tfcluster-worker --epochs 3 --data $(HOME)/data
tasks: {chief: 1, worker: 2, ps: 2, evaluator: 1}
ports: {base: 23476}
env:
  API_TOKEN: "tok-$(not-expanded)-42"
  DATA_DIR: /data
restart: {max_restarts: 4}
"""
# A single-host strategy: TF_CONFIG is the task alone (no cluster).
ONE = "name: one\nstrategy: mirrored\nentrypoint: tfcluster-worker --epochs 1\ntasks: {worker: 1}\n"
# What the fake entrypoint prints: what the pod's process was given.
PRINTER = """#!{python}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "tf_config": os.environ["TF_CONFIG"],
                  "task": os.environ.get("TFCLUSTER_TASK"), "token": os.environ.get("API_TOKEN"),
                  "restart": os.environ.get("TFCLUSTER_RESTART_COUNT")}}))
"""


def _jobs(doc: dict) -> dict[str, dict]:
    return {j["name"]: j for j in doc["spec"]["replicatedJobs"]}


def _container(doc: dict, name: str) -> dict:
    return _jobs(doc)[name]["template"]["spec"]["template"]["spec"]["containers"][0]


def _export(tmp_path: Path, text: str, *extra: str) -> tuple[dict, dict, Path]:
    """Export with the CLI; (JobSet, Secret or {}, the JobSet's path)."""
    spec = spec_file(tmp_path, text)
    assert main(["export", str(spec), "--to", "jobset", *extra]) == 0
    name = load_spec(spec).spec.name
    out = tmp_path / f"{name}.jobset.yaml"
    secret = tmp_path / f"{name}.jobset.secret.yaml"
    return yaml.safe_load(out.read_text()), (yaml.safe_load(secret.read_text()) if secret.exists() else {}), out


@pytest.mark.parametrize("text,types,order,startup", [
    (DEMO3, {"worker": 3}, ["worker"], None),
    (PSS, {"chief": 1, "worker": 2, "ps": 2, "evaluator": 1}, ["ps", "worker", "chief", "evaluator"], "InOrder"),
], ids=["demo-3-workers", "pss"])
def test_shape_validates_and_maps_restarts(tmp_path, text, types, order, startup):
    doc, _, _ = _export(tmp_path, text)
    assert validate_jobset(doc) == []
    assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and doc["kind"] == "JobSet"
    loaded = load_spec(tmp_path / "cluster.yaml")
    body = doc["spec"]
    assert body["failurePolicy"]["maxRestarts"] == loaded.spec.restart.max_restarts
    assert body["network"] == {"enableDNSHostnames": True, "subdomain": loaded.spec.name}
    assert [j["name"] for j in body["replicatedJobs"]] == order
    assert body.get("startupPolicy", {}).get("startupPolicyOrder") == startup
    for name, count in types.items():
        job = _jobs(doc)[name]
        assert job["replicas"] == 1
        spec = job["template"]["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", count, count)
        assert spec["backoffLimit"] == 0  # a failed pod fails its Job: the JobSet restarts every Job
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        container = pod["containers"][0]
        assert container["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
        ports = [{"name": "tf-server", "containerPort": loaded.spec.ports.base}]
        assert container.get("ports") == (None if name == "evaluator" else ports)
        # Permanent exit codes (1-127 by default) fail the Job at once, and the rule the JobSet
        # without a restart.
        rule = spec["podFailurePolicy"]["rules"][0]
        assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == list(range(1, 128))
    assert body["failurePolicy"]["rules"] == [
        {"name": "permanentExitCode", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]
    success = export_plan(loaded.spec).success_task.split(":")[0]
    assert body["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [success]}


def test_restart_budgets_without_permanent_codes_and_none(tmp_path):
    doc = jobset_dict(load_spec(spec_file(tmp_path, PSS.replace("{max_restarts: 4}", "{max_restarts: 7, "
                                                                "permanent_exit_codes: []}"))))
    assert validate_jobset(doc) == []
    assert doc["spec"]["failurePolicy"] == {"maxRestarts": 7}  # every failure retried
    assert all("podFailurePolicy" not in j["template"]["spec"] for j in doc["spec"]["replicatedJobs"])
    doc = jobset_dict(load_spec(spec_file(tmp_path, PSS.replace("{max_restarts: 4}", "{max_restarts: 0}"))))
    assert doc["spec"]["failurePolicy"] == {"maxRestarts": 0}


# ---------------------------------------------------------------- every pod, started as Kubernetes would


def _pod_env(container: dict, secret: dict, index: int, bin_dir: Path) -> dict[str, str]:
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(index)}
    for entry in container["env"]:
        if "fieldRef" in entry.get("valueFrom", {}):  # the JobSet controller's label on the pod, first attempt
            assert entry["valueFrom"]["fieldRef"] == {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}
            env[entry["name"]] = "0"
        elif "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == secret["metadata"]["name"]  # the Secret the export wrote
            env[entry["name"]] = secret["stringData"][ref["key"]]
        else:
            env[entry["name"]] = entry["value"].replace("$$(", "$(")  # what Kubernetes makes of it
    return env


def _pod_argv(container: dict, tini: str) -> list[str]:
    """command + args, with the image's two paths as they are here (the image's tini; the helper
    is launcher/remote/jobsetpod.py, which the Dockerfile copies there)."""
    here = {TINI: tini, POD_HELPER: str(REMOTE_DIR / "jobsetpod.py")}
    return [here.get(a, a).replace("$$(", "$(") for a in container["command"] + container["args"]]


def _fake_image_bin(tmp_path: Path, entrypoint: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    fake = bin_dir / entrypoint
    fake.write_text(PRINTER.format(python=sys.executable))
    fake.chmod(0o755)
    return bin_dir


def _jobset_address(spec_name: str, address: str) -> str:
    task, port = address.rsplit(":", 1)
    task_type, index = task.rsplit("-", 1)
    return f"{spec_name}-{task_type}-0-{index}.{spec_name}:{port}"


@pytest.mark.parametrize("text", [DEMO3, PSS, ONE], ids=["demo-3-workers", "pss", "single-host"])
def test_every_pod_sees_the_plans_tf_config_with_jobset_hostnames(tmp_path, text, capsys):
    tini = require_tool("tini", "tini")
    doc, secret, _ = _export(tmp_path, text)
    loaded = load_spec(tmp_path / "cluster.yaml")
    spec = loaded.spec
    assert main(["plan", "--json", str(tmp_path / "cluster.yaml")]) == 0
    planned = {(t["type"], t["index"]): t for t in json.loads(capsys.readouterr().out)["tasks"]}
    exported = {(t.type, t.index): t for t in export_plan(spec).tasks}
    assert set(exported) == set(planned)
    bin_dir = _fake_image_bin(tmp_path, spec.argv[0])
    seen = set()
    for name, job in _jobs(doc).items():
        container = _container(doc, name)
        for index in range(job["template"]["spec"]["completions"]):
            run = subprocess.run(_pod_argv(container, tini), env=_pod_env(container, secret, index, bin_dir),
                                 capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            got = json.loads(run.stdout)
            # The exact text the export plan gives the task (its addresses are `type-i:port`),
            # each address the pod's JobSet hostname.
            want_text = exported[(name, index)].tf_config_json
            for t in exported.values():
                if t.endpoint:
                    want_text = want_text.replace(f'"{t.endpoint}"', f'"{_jobset_address(spec.name, t.endpoint)}"')
            assert got["tf_config"] == want_text
            # The same dict `tfcluster plan --json` gives that task (same types, order, members,
            # task), with JobSet hostnames and the one port every pod serves on.
            want = copy.deepcopy(planned[(name, index)]["tf_config"])
            for task_type, members in want.get("cluster", {}).items():
                want["cluster"][task_type] = [f"{spec.name}-{task_type}-0-{i}.{spec.name}:{spec.ports.base}"
                                              for i in range(len(members))]
            assert json.loads(got["tf_config"]) == want
            assert "evaluator" not in want.get("cluster", {})
            assert got["task"] == f"{name}:{index}" and got["restart"] == "0"
            assert got["argv"] == list(spec.argv[1:])  # the entrypoint's own args, $(HOME) not expanded
            if "API_TOKEN" in spec.env:
                assert got["token"] == "tok-$(not-expanded)-42"
            seen.add((name, index))
    assert seen == set(planned)  # every task of the plan is one pod


def test_the_pod_helper_refuses_a_pod_without_an_index(tmp_path):
    doc = jobset_dict(load_spec(spec_file(tmp_path, DEMO3)))
    container = _container(doc, "worker")
    argv = [sys.executable, str(REMOTE_DIR / "jobsetpod.py"), *container["args"]]
    for env in ({}, {"JOB_COMPLETION_INDEX": "3"}, {"JOB_COMPLETION_INDEX": "x"}):
        run = subprocess.run(argv, env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
        assert run.stderr.startswith("jobsetpod: JOB_COMPLETION_INDEX=")


def test_the_worker_images_ship_the_pod_helper_where_the_jobset_runs_it():
    text = (ROOT / "launcher" / "image" / "Dockerfile").read_text()
    copy_line = text.split("mkdir -p /usr/local/lib/tfcluster", 1)[1].split("\n\n", 1)[0]
    assert '"jobsetpod.py"' in copy_line and f'"{Path(POD_HELPER).parent.as_posix()}/"' in copy_line
    assert f'ENTRYPOINT ["{TINI}", "-g", "--"]' in text  # the tini the pods' command names


# ---------------------------------------------------------------- secrets by reference


@pytest.mark.parametrize("target", ["jobset", "tfjob"])
def test_secret_values_go_to_a_0600_secret_read_by_reference(tmp_path, target, capsys):
    spec = spec_file(tmp_path, PSS)
    assert main(["export", str(spec), "--to", target]) == 0
    job_file = tmp_path / f"pss.{target}.yaml"
    secret_file = tmp_path / f"pss.{target}.secret.yaml"
    assert "tok-" not in job_file.read_text()  # the value is nowhere in the job's file
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert f"kubectl apply -f {secret_file.name} && kubectl apply -f {job_file.name}" in job_file.read_text()
    secret = yaml.safe_load(secret_file.read_text())
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert secret["stringData"] == {"API_TOKEN": "tok-$(not-expanded)-42"}  # verbatim: no expansion there
    assert secret["metadata"]["namespace"] == "default"
    job = yaml.safe_load(job_file.read_text())
    refs, plain = [], []
    for container in _all_containers(job):
        for entry in container["env"]:
            (refs if "secretKeyRef" in entry.get("valueFrom", {}) else plain).append(entry)
    assert refs and all(r == {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": secret["metadata"]["name"], "key": "API_TOKEN"}}} for r in refs)
    assert {"name": "DATA_DIR", "value": "/data"} in plain
    assert f"in {secret_file.name} (mode 0600)" in capsys.readouterr().err
    # stdout cannot be a 0600 file: refused, nothing printed.
    assert main(["export", str(spec), "--to", target, "-o", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "API_TOKEN" in err and "give -o PATH" in err


@pytest.mark.parametrize("target", ["jobset", "tfjob"])
def test_a_secret_known_by_its_value_alone_goes_to_the_secret(tmp_path, target):
    """A name the name rule misses (DATABASE_URL, HF_HUB) with a secret-shaped value (a URL with a
    password, an issued token's prefix) is kept out of the job's file too: the export asks the
    same rule as the plan's masking, value included."""
    extra = "env:\n  DATABASE_URL: postgres://app:pw-9f3@db:5432/x\n  HF_HUB: hf_abcdefghijklmnopqrstuvwxyz0123\n  PLAIN_X: hello\n"
    assert "\nenv:" in DEMO3  # (the demo has an env block: the variables join it)
    spec = spec_file(tmp_path, DEMO3.replace("\nenv:\n", "\n" + extra, 1))
    assert main(["export", str(spec), "--to", target]) == 0
    job_text = next(p for p in tmp_path.glob(f"*.{target}.yaml")).read_text()
    assert "pw-9f3" not in job_text and "hf_abcdefghij" not in job_text and "hello" in job_text
    secret = yaml.safe_load(next(tmp_path.glob(f"*.{target}.secret.yaml")).read_text())
    assert sorted(secret["stringData"]) == ["DATABASE_URL", "HF_HUB"]


def _all_containers(doc: dict) -> list[dict]:
    if doc["kind"] == "TFJob":
        return [r["template"]["spec"]["containers"][0] for r in doc["spec"]["tfReplicaSpecs"].values()]
    return [j["template"]["spec"]["template"]["spec"]["containers"][0] for j in doc["spec"]["replicatedJobs"]]


def test_without_secret_env_no_secret_file(tmp_path):
    _, secret, out = _export(tmp_path, DEMO3)
    assert secret == {} and sorted(p.name for p in tmp_path.iterdir()) == ["cluster.yaml", out.name]


# ---------------------------------------------------------------- options, GPUs, CLI

GPU_PSS = """\
name: pss-gpu
strategy: parameter_server
entrypoint: python -m worker
tasks: {chief: 1, worker: 2, ps: 2}
devices: {gpus_per_task: 2}
docker: {shm_size: 2g}
kubernetes:
  namespace: training
  queue: team-a
  ttl_seconds_after_finished: 600
  active_deadline_seconds: 7200
  service_account: trainer
  resources:
    default: {cpu: 4, memory: 8Gi}
"""


def test_gpus_resources_and_kubernetes_options(tmp_path):
    doc = jobset_dict(load_spec(spec_file(tmp_path, GPU_PSS)), image="gcr.io/p/w:1")
    assert validate_jobset(doc) == []
    assert doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert doc["metadata"]["namespace"] == "training" and doc["spec"]["ttlSecondsAfterFinished"] == 600
    limits = {t: _container(doc, t)["resources"]["limits"] for t in ("chief", "worker", "ps")}
    # The TFJob's rule (common.type_gpus): gpus_per_task for the workers, none for ps and the PSS chief.
    assert limits == {"chief": {"cpu": "4", "memory": "8Gi"}, "ps": {"cpu": "4", "memory": "8Gi"},
                      "worker": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2}}
    env = {t: {e["name"]: e.get("value") for e in _container(doc, t)["env"]} for t in ("chief", "worker", "ps")}
    assert env["ps"]["CUDA_VISIBLE_DEVICES"] == env["chief"]["CUDA_VISIBLE_DEVICES"] == "-1"
    assert "CUDA_VISIBLE_DEVICES" not in env["worker"]
    for name, job in _jobs(doc).items():
        spec = job["template"]["spec"]
        pod = spec["template"]["spec"]
        assert spec["activeDeadlineSeconds"] == 7200 and pod["serviceAccountName"] == "trainer"
        assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}  # docker.shm_size 2g
        assert pod["containers"][0]["image"] == "gcr.io/p/w:1"


def test_cli_header_and_stdout(tmp_path, capsys):
    _, _, out = _export(tmp_path, DEMO3)
    text = out.read_text()
    assert text.startswith("# Generated by `tfcluster export` from cluster.yaml (--to jobset)")
    assert "# Submit: kubectl apply -f demo.jobset.yaml" in text and "not run here" in text
    assert "&id" not in text
    assert "validated against the JobSet CRD schema" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "cluster.yaml"), "--to", "jobset", "-o", "-"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["kind"] == "JobSet"


def test_a_name_too_long_for_the_pods_is_one_line(tmp_path, capsys):
    spec = spec_file(tmp_path, DEMO3.replace("name: demo", "name: " + "d" * 55))
    assert main(["export", str(spec), "--to", "jobset", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "pod name" in err and "shorten the JobSet's name" in err


# ---------------------------------------------------------------- the validator catches each rule


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> dict:
    doc = jobset_dict(load_spec(spec_file(tmp_path_factory.mktemp("good"), PSS)))
    assert validate_jobset(doc) == []
    return doc


def _set(path: str, value):
    def change(doc):
        node = doc
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        node[keys[-1]] = value
    return change


JOB0 = "spec.replicatedJobs.0.template.spec"
BROKEN = [
    ("completions a string (schema)", _set(f"{JOB0}.completions", "2"), "'2' is not of type 'integer'"),
    ("startupPolicy enum (schema)", _set("spec.startupPolicy.startupPolicyOrder", "Sometimes"), "is not one of"),
    ("unknown field", _set(f"{JOB0}.completion", 2), "template.spec.completion: unknown field"),
    ("unknown container field", _set(f"{JOB0}.template.spec.containers.0.enviroment", []), "enviroment: unknown field"),
    ("success target", _set("spec.successPolicy.targetReplicatedJobs", ["master"]), "'master' is not a replicated job"),
    ("rule name", _set("spec.failurePolicy.rules.0.name", "exit-code"), "rules[0].name: 'exit-code'"),
    ("rule reason", _set("spec.failurePolicy.rules.0.onJobFailureReasons", ["Crashed"]), "'Crashed' is not one of"),
    ("pod failure policy with OnFailure", _set(f"{JOB0}.template.spec.restartPolicy", "OnFailure"),
     "podFailurePolicy: needs the pods' restartPolicy Never"),
    ("pod restartPolicy Always", _set(f"{JOB0}.template.spec.restartPolicy", "Always"), "a Job's pods take Never"),
    ("exit code 0 with In", _set(f"{JOB0}.podFailurePolicy.rules.0.onExitCodes.values", [0, 1]), "0 cannot be used"),
    ("subdomain", _set("spec.network.subdomain", "Pss_net"), "spec.network.subdomain: 'Pss_net'"),
    ("name", _set("metadata.name", "PSS"), "metadata.name: 'PSS' is not a DNS-1035 label"),
    ("duplicate replicated job", lambda d: d["spec"]["replicatedJobs"].append(copy.deepcopy(d["spec"]["replicatedJobs"][0])),
     "name 'ps' is used twice"),
    ("completion mode", _set(f"{JOB0}.completionMode", "Ordered"), "completionMode: 'Ordered'"),
    ("missing image", _set(f"{JOB0}.template.spec.containers.0.image", ""), "containers[0].image: required"),
    ("wrong apiVersion", _set("apiVersion", "jobset.x-k8s.io/v1alpha1"), "must be jobset.x-k8s.io/v1alpha2/JobSet"),
    ("no replicated jobs", _set("spec.replicatedJobs", []), "spec.replicatedJobs: required"),
]


@pytest.mark.parametrize("what,change,expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_validator_rejects(good, what, change, expected):
    doc = copy.deepcopy(good)
    change(doc)
    problems = validate_jobset(doc)
    assert any(expected in p for p in problems), problems


def test_the_crd_schema_alone_misses_what_the_webhook_and_job_rules_catch(good):
    import jsonschema

    schema_only = jsonschema.Draft4Validator(jobset_schema())
    by_name = {what: (change, expected) for what, change, expected in BROKEN}
    for what in ("success target", "rule name", "pod failure policy with OnFailure", "unknown field"):
        change, expected = by_name[what]
        doc = copy.deepcopy(good)
        change(doc)
        assert list(schema_only.iter_errors(doc)) == [], what
        problems = validate_jobset(doc)
        assert len(problems) == 1 and expected in problems[0], (what, problems)


def test_the_vendored_crd_is_the_recorded_one():
    import hashlib

    crd = ROOT / "launcher" / "schemas" / "jobset.x-k8s.io_jobsets.yaml"
    readme = (ROOT / "launcher" / "schemas" / "README.md").read_text()
    assert hashlib.sha256(crd.read_bytes()).hexdigest() in readme
    assert (ROOT / "launcher" / "schemas" / "LICENSE.jobset").read_text().lstrip().startswith("Apache License")


def test_the_docs_show_the_generated_demo(capsys):
    from tests.support.readme import docs_block

    assert main(["export", str(DEMO), "--to", "jobset", "-o", "-"]) == 0
    assert docs_block("gke-jobset.md", "The demo (`tfcluster export cluster.yaml --to jobset`)") == capsys.readouterr().out


def test_any_permanent_exit_codes_map_to_the_pod_failure_policy(tmp_path):
    """What a TFJob cannot express (codes other than 1-127 or none) a JobSet can: exactly those codes."""
    doc = jobset_dict(load_spec(spec_file(tmp_path, PSS.replace("{max_restarts: 4}", "{max_restarts: 2, "
                                                                "permanent_exit_codes: [3, 1, 42]}"))))
    assert validate_jobset(doc) == []
    for job in doc["spec"]["replicatedJobs"]:
        rule = job["template"]["spec"]["podFailurePolicy"]["rules"][0]
        assert rule["onExitCodes"] == {"containerName": "tensorflow", "operator": "In", "values": [1, 3, 42]}
