"""A problem found while planning (after the spec loaded: the ports of ``ports.base``, explicit ports
that collide, ``hosts[].slots``, the GPUs) is a spec error like every other: ``FILE:LINE: field:
problem; fix``, the line of the key that causes it, from `validate`, `plan` and `validate --json`."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.support.cli import tfcluster

CASES = {
    "base": ("""\
        name: p
        strategy: multi_worker_mirrored
        entrypoint: tfcluster-worker
        tasks:
          worker: 3
        ports:
          base: 65534
        """, 7, "ports.base: 65534 leaves no room for worker:2"),
    "duplicate ports": ("""\
        name: p
        strategy: multi_worker_mirrored
        entrypoint: tfcluster-worker
        tasks:
          chief: 1
          worker:
            count: 2
            ports: [5000, 5000]
        """, 8, "tasks.worker.ports: port 5000 on localhost is used by both worker:0 and worker:1"),
    "slots": ("""\
        name: p
        strategy: multi_worker_mirrored
        backend: ssh
        entrypoint: tfcluster-worker
        hosts:
          - name: a
          - name: b
            slots: 1
        tasks:
          worker:
            count: 3
            hosts: [b]
        """, 8, "hosts[].slots: the tasks do not fit: b (3 tasks, 1 slot)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["validate", "plan"])
def test_a_plan_time_error_names_the_file_and_the_line_of_its_key(tmp_path, case, command):
    text, line, message = CASES[case]
    spec = tmp_path / "cluster.yaml"
    spec.write_text(textwrap.dedent(text))
    result = tfcluster(command, spec, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"tfcluster: error: {spec}:{line}: {message}"
                                                  + result.stderr.strip().split(message, 1)[1]], result.stderr
    assert result.stdout == ""


def test_validate_json_carries_the_located_line(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(textwrap.dedent(CASES["base"][0]))
    result = tfcluster("validate", "--json", "cluster.yaml", cwd=tmp_path)
    assert result.returncode == 2
    out = json.loads(result.stdout)
    assert out["valid"] is False
    assert out["errors"][0].startswith("cluster.yaml:7: ports.base: 65534 leaves no room"), out


def test_a_gpu_refusal_is_at_the_key_it_names(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(textwrap.dedent("""\
        name: p
        strategy: multi_worker_mirrored
        entrypoint: tfcluster-worker
        tasks:
          worker: 2
        devices:
          gpus: [0]
          gpus_per_task: 2
        """))
    # (the machine's GPUs are looked up: without one, GPU 0 is missing; with one, two tasks x 2 GPUs do not fit)
    result = tfcluster("plan", "cluster.yaml", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": "-1"})
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith("tfcluster: error: cluster.yaml:7: ") or \
        result.stderr.startswith("tfcluster: error: cluster.yaml:8: "), result.stderr
