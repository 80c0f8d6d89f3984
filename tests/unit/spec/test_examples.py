"""The example specs shipped in examples/ stay valid, and say what they claim."""

from __future__ import annotations

import json

from tests.support.cli import ROOT, tfcluster

PSS = ROOT / "examples" / "parameter_server.yaml"


def test_parameter_server_example_validates():
    result = tfcluster("validate", str(PSS))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{PSS}: ok (parameter_server, 5 tasks on local)"


def test_parameter_server_example_plan_topology():
    result = tfcluster("plan", str(PSS), "--json")
    assert result.returncode == 0, result.stderr
    tasks = json.loads(result.stdout)["tasks"]
    assert [f"{t['type']}:{t['index']}" for t in tasks] == ["chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"]
    cluster = tasks[0]["tf_config"]["cluster"]
    assert sorted(cluster) == ["chief", "ps", "worker"]  # the evaluator is kept out of the cluster
    assert all(t["tf_config"]["cluster"] == cluster for t in tasks)
    assert all(t["command"][0] == "tfcluster-worker" for t in tasks)  # the script: no worker.py can shadow it
    assert all(t["env"]["TFCLUSTER_STRATEGY"] == "parameter_server" for t in tasks)


def test_mirrored_example_is_one_task_without_a_cluster():
    path = ROOT / "examples" / "mirrored.yaml"
    result = tfcluster("plan", str(path), "--json")
    assert result.returncode == 0, result.stderr
    [task] = json.loads(result.stdout)["tasks"]
    assert (task["type"], task["index"], task["port"], task["tf_config"]) == (
        "worker", 0, None, {"task": {"type": "worker", "index": 0}})
    assert (task["env"]["TFCLUSTER_STRATEGY"], task["env"]["TFCLUSTER_CPUS"]) == ("mirrored", "2")


def test_the_preemption_handler_script_in_the_docs_is_the_example_file():
    page = (ROOT / "docs" / "your-script.md").read_text()
    section = page.split("\n## TensorFlow's preemption handler\n", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert block == (ROOT / "examples" / "preemption_handler.py").read_text()
