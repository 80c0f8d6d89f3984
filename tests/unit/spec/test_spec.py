"""Spec validation: one test per user error, each asserting the one-line message names the
field, the YAML line where possible, and the fix."""

from __future__ import annotations

import textwrap

import pytest

from launcher.errors import SpecError
from launcher.loader.load import load_spec, parse_spec
from tests.support.errors import one_error, spec_errors
from tests.support.specs import BASE


def test_valid_minimal_spec_has_defaults():
    spec = parse_spec(BASE)
    assert spec.backend == "local"
    assert spec.tasks.count("worker") == 2 and spec.tasks.count("chief") == 0
    assert spec.ports.base == 23456
    assert spec.argv == ("python", "-m", "worker")
    assert spec.restart.max_restarts == 0


def test_entrypoint_as_list_and_env_values_become_strings():
    spec = parse_spec(BASE.replace("entrypoint: python -m worker", "entrypoint: [python, train.py, --lr, '0.1']")
                      + "env: {LR: 0.1, DEBUG: true, N: 3}\n")
    assert spec.argv == ("python", "train.py", "--lr", "0.1")
    assert spec.env == {"LR": "0.1", "DEBUG": "1", "N": "3"}


def test_unknown_top_level_key_suggests_close_match():
    msg = one_error(BASE + "strategi: x\n")
    assert msg.startswith("c.yaml:6: strategi: unknown key 'strategi' (did you mean 'strategy'?)")


def test_unknown_nested_key_lists_valid_keys():
    msg = one_error(BASE + "ports: {bas: 1000}\n")
    assert "c.yaml:6: ports.bas: unknown key 'bas' (did you mean 'base'?); valid keys: base" == msg


def test_bad_strategy_lists_valid_values():
    msg = one_error(BASE.replace("multi_worker_mirrored", "mirored"))
    assert msg.startswith("c.yaml:2: strategy: 'mirored' is not valid; use one of")
    for name in ("multi_worker_mirrored", "parameter_server", "mirrored", "central_storage", "one_device",
                 "default", "tpu"):
        assert f"'{name}'" in msg


def test_bad_backend_lists_valid_values():
    msg = one_error(BASE + "backend: k8s\n")
    assert "backend: 'k8s' is not valid; use one of 'local', 'ssh', 'docker' or 'slurm'" in msg


def test_master_role_says_use_chief():
    msg = one_error(BASE + "  master: 1\n")
    assert msg == "c.yaml:6: tasks.master: the legacy role 'master' is not supported; use chief"


def test_negative_count():
    msg = one_error(BASE.replace("worker: 2", "worker: -1"))
    assert msg == "c.yaml:5: tasks.worker: task count must be a whole number >= 0 (got -1)"


def test_non_integer_count():
    assert "tasks.worker: task count must be a whole number >= 0 (got 1.5)" in one_error(BASE.replace("worker: 2", "worker: 1.5"))
    assert "(got 'two')" in one_error(BASE.replace("worker: 2", "worker: two"))


def test_count_in_mapping_form_is_validated_too():
    msg = one_error(BASE.replace("worker: 2", "worker: {count: -2}"))
    assert "tasks.worker.count: task count must be a whole number >= 0 (got -2)" in msg


def test_mwms_rejects_ps():
    msg = one_error(BASE + "  ps: 1\n")
    assert msg == ("c.yaml:6: tasks.ps: multi_worker_mirrored has no parameter servers; "
                   "set ps: 0 or use strategy: parameter_server")


def test_mwms_needs_a_worker_or_chief():
    msg = one_error(BASE.replace("worker: 2", "worker: 0"))
    assert "tasks.worker: no workers; multi_worker_mirrored needs at least one worker or chief" in msg


def test_mwms_two_chiefs():
    assert "tasks.chief: 2 chiefs; a cluster has at most one chief" in one_error(BASE + "  chief: 2\n")


@pytest.mark.parametrize(
    "tasks, expected",
    [
        ("{worker: 2, ps: 1}", "tasks.chief: parameter_server needs exactly one chief (the coordinator); set chief: 1"),
        ("{chief: 2, worker: 2, ps: 1}", "tasks.chief: 2 chiefs; a cluster has at most one chief"),
        ("{chief: 1, worker: 2}", "tasks.ps: parameter_server needs at least one ps; set ps: 1 or more"),
        ("{chief: 1, ps: 1}", "tasks.worker: parameter_server needs at least one worker; set worker: 1 or more"),
        ("{chief: 1, worker: 1, ps: 1, evaluator: 2}", "tasks.evaluator: 2 evaluators; at most one evaluator is allowed"),
    ],
)
def test_parameter_server_topology(tasks, expected):
    text = f"name: p\nstrategy: parameter_server\nentrypoint: python -m worker\ntasks: {tasks}\n"
    lines = spec_errors(text)
    assert any(expected in line for line in lines), lines


def test_at_most_one_evaluator():
    assert "at most one evaluator" in one_error(BASE + "  evaluator: 2\n")


def test_undefined_host_name_lists_defined_hosts():
    text = BASE.replace("worker: 2", "worker: {count: 2, hosts: [vm1, vm3]}") + textwrap.dedent("""\
        backend: ssh
        hosts:
          - {name: vm1, ssh: root@10.0.0.1}
          - {name: vm2, ssh: root@10.0.0.2}
    """)
    msg = one_error(text)
    assert msg == "c.yaml:5: tasks.worker.hosts[1]: unknown host 'vm3' (did you mean 'vm2'?); defined hosts: vm1, vm2"


def test_duplicate_host_names():
    text = BASE + "backend: ssh\nhosts:\n  - {name: vm1}\n  - {name: vm1}\n"
    msg = one_error(text)
    assert msg == "c.yaml:9: hosts[1].name: host 'vm1' is defined twice; give each host a unique name"


def test_port_base_out_of_range():
    msg = one_error(BASE + "ports: {base: 70000}\n")
    assert msg == "c.yaml:6: ports.base: port must be a whole number from 1 to 65535 (got 70000)"


def test_explicit_port_out_of_range():
    msg = one_error(BASE.replace("worker: 2", "worker: {count: 2, ports: [2000, 0]}"))
    assert "tasks.worker.ports: port 0 is out of range; use a whole number from 1 to 65535" in msg


def test_explicit_ports_must_match_count():
    msg = one_error(BASE.replace("worker: 2", "worker: {count: 2, ports: [2000]}"))
    assert "tasks.worker: 1 ports listed for 2 tasks; list exactly one port per task" in msg


def test_empty_entrypoint():
    msg = one_error(BASE.replace("entrypoint: python -m worker", "entrypoint: '  '"))
    assert msg.startswith("c.yaml:3: entrypoint: empty command; give the command every task runs")
    assert "entrypoint: empty command" in one_error(BASE.replace("entrypoint: python -m worker", "entrypoint: []"))


def test_entrypoint_with_unbalanced_quote():
    msg = one_error(BASE.replace("entrypoint: python -m worker", "entrypoint: python -c 'print(1)"))
    assert "entrypoint: cannot split the command (No closing quotation); check its quotes" in msg


def test_missing_required_keys_say_what_to_add():
    lines = spec_errors("name: x\ntasks: {worker: 1}\n")
    assert any("strategy: required key is missing; add strategy: multi_worker_mirrored" in l for l in lines)
    assert any("entrypoint: required key is missing; add entrypoint: tfcluster-worker" in l for l in lines)


def test_yaml_syntax_error_names_line():
    msg = one_error("name: x\ntasks:\n  worker: [1, 2\nstrategy: y\n")
    assert msg.startswith("c.yaml:4: YAML syntax error:")
    assert msg.endswith("fix the indentation or quoting there")


def test_duplicate_yaml_key():
    msg = one_error(BASE + "name: again\n")
    assert msg == "c.yaml:6: YAML syntax error: key 'name' appears twice (first on line 1); keep one; fix the indentation or quoting there"


def test_empty_file():
    assert one_error("") == "c.yaml: the file is empty; start from the example cluster.yaml in the README"
    assert one_error("# only a comment\n").endswith("the file is empty; start from the example cluster.yaml in the README")


def test_non_mapping_file():
    assert one_error("- a\n- b\n") == "c.yaml:1: the top level must be a mapping (name:, strategy:, tasks:, ...), not a list"


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.lines == (f"{tmp_path / 'nope.yaml'}: file not found; pass the path of your cluster.yaml",)


def test_env_rejects_tf_config_and_bad_names():
    assert "TF_CONFIG is set by tfcluster for each task; remove it from env" in one_error(BASE + "env: {TF_CONFIG: x}\n")
    assert "'1BAD' is not a valid environment variable name" in one_error(BASE + "env: {1BAD: x}\n")


def test_bad_run_name():
    assert "'my run' is not a valid run name" in one_error(BASE.replace("name: demo", "name: my run"))


def test_ssh_backend_needs_hosts():
    assert "hosts: backend ssh needs hosts" in one_error(BASE + "backend: ssh\n")


def test_restart_and_watchdog_values():
    assert "restart.max_restarts: must be a whole number >= 0 (got -1)" in one_error(BASE + "restart: {max_restarts: -1}\n")
    assert "watchdog.startup_timeout" in one_error(BASE + "watchdog: {startup_timeout: 0}\n")


def test_several_errors_reported_one_line_each():
    lines = spec_errors(BASE + "bogus: 1\nports: {base: -1}\n")
    assert len(lines) == 2
    assert lines[0].startswith("c.yaml:6: bogus: unknown key") and lines[1].startswith("c.yaml:7: ports.base:")


def test_warm_standby_is_auto_by_default_and_true_is_not_refused_where_the_backend_keeps_none():
    assert parse_spec(BASE + "restart: {max_restarts: 1, warm_standby: true}\n").restart.warm_standby is True
    assert parse_spec(BASE).restart.warm_standby == "auto"
    assert parse_spec(BASE + "backend: docker\n").restart.warm_standby == "auto"  # the default: not refused
    assert parse_spec(BASE + "backend: docker\nrestart: {warm_standby: false}\n").restart.warm_standby is False
    assert parse_spec(BASE + "backend: docker\nrestart: {warm_standby: true}\n").restart.warm_standby is True
    assert "restart.warm_standby" in one_error(BASE + "restart: {warm_standby: sometimes}\n")


SINGLE = "name: demo\nstrategy: {}\nentrypoint: python -m worker\n"


@pytest.mark.parametrize("strategy", ["mirrored", "central_storage", "one_device", "default", "tpu"])
def test_single_host_strategies_default_to_one_worker(strategy):
    spec = parse_spec(SINGLE.format(strategy))
    assert spec.single_host and (spec.tasks.count("worker"), spec.tasks.count("chief")) == (1, 0)


@pytest.mark.parametrize("tasks", ["{worker: 2}", "{chief: 1}", "{worker: 1, evaluator: 1}"])
def test_single_host_strategy_with_several_tasks_is_one_line(tasks):
    assert one_error(SINGLE.format("mirrored") + f"tasks: {tasks}\n") == (
        "c.yaml:4: tasks: strategy mirrored runs one task on one host; for several hosts use "
        "multi_worker_mirrored (or set tasks: {worker: 1})")


@pytest.mark.parametrize("gpus, visible", [("all", None), ("2", "0,1"), ("0", "-1"), ("[0, 2]", "0,2")])
def test_devices_gpus(gpus, visible):
    spec = parse_spec(SINGLE.format("mirrored") + f"devices: {{gpus: {gpus}, cpus: 2}}\n")
    assert spec.devices.cuda_visible_devices == visible and spec.devices.cpus == 2


@pytest.mark.parametrize("devices, problem", [
    ("{gpus: many}", "devices.gpus: 'many' is not valid; use all, a number of GPUs (2), or a list of GPU indices ([0, 2])"),
    ("{gpus: [1, 1]}", "devices.gpus: [1, 1] lists a GPU twice; list each GPU index once"),
    ("{cpus: 0}", "devices.cpus: must be a whole number >= 1 (got 0)"),
    ("{tpus: 1}", "devices.tpus: unknown key 'tpus' (did you mean 'gpus'?); valid keys: gpus, gpus_per_task, gpu_memory, cpu_fallback, cpus, threads"),
])
def test_bad_devices_are_one_line(devices, problem):
    assert one_error(SINGLE.format("mirrored") + f"devices: {devices}\n") == f"c.yaml:4: {problem}"


def test_cpus_under_a_cluster_strategy_and_tpu_block_elsewhere_are_rejected():
    assert one_error(BASE + "devices: {cpus: 2}\n") == (
        "c.yaml:6: devices.cpus: multi_worker_mirrored runs one replica per task on CPU (TF splits only GPUs "
        "across a worker's replicas); drop devices.cpus or use strategy: mirrored")
    assert one_error(SINGLE.format("mirrored") + "tpu: {name: t1}\n") == (
        "c.yaml:4: tpu: only strategy tpu uses a TPU; remove tpu: or set strategy: tpu")


def test_tpu_block():
    spec = parse_spec(SINGLE.format("tpu") + "tpu: {name: my-tpu, zone: us-central1-b, project: p}\n")
    assert (spec.tpu.name, spec.tpu.zone, spec.tpu.project) == ("my-tpu", "us-central1-b", "p")


def test_ssh_supervisor_must_name_a_host_of_an_ssh_spec():
    hosts = "backend: ssh\nhosts:\n  - {name: vm1}\n  - {name: vm2}\n"
    assert parse_spec(BASE + hosts + "ssh: {supervisor: vm2}\n").ssh.supervisor == "vm2"
    err = one_error(BASE + hosts + "ssh: {supervisor: vm3}\n")
    assert "ssh.supervisor: unknown host 'vm3'" in err and "defined hosts: vm1, vm2" in err
    assert "cannot be combined with ssh.sync" in one_error(BASE + hosts + "ssh: {supervisor: vm1, sync: ['.']}\n")
