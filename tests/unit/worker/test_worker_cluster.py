"""The worker's view of TF_CONFIG and its flags (no TensorFlow needed)."""

from __future__ import annotations

import json

import pytest

from worker.cluster import ConfigError, task_from_env
from worker.main import parse_args


def conf(cluster, task_type, index):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


@pytest.mark.parametrize(
    "cluster, task_type, index, chief, workers",
    [
        ({"worker": ["a:1", "b:1"]}, "worker", 0, True, 2),  # worker 0 is chief without a chief
        ({"worker": ["a:1", "b:1"]}, "worker", 1, False, 2),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "worker", 0, False, 2),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "chief", 0, True, 2),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "evaluator", 0, False, 2),
    ],
)
def test_chief_rules(cluster, task_type, index, chief, workers):
    task = task_from_env(conf(cluster, task_type, index))
    assert (task.is_chief, task.num_workers, task.key) == (chief, workers, f"{task_type}:{index}")


@pytest.mark.parametrize("private, expected", [(None, False), ("0", False), ("1", True)])
def test_a_worker_keeps_its_own_backups_only_on_a_private_state_dir(private, expected):
    """On a shared state dir only the chief writes where everyone restores from; on a private
    one (TFCLUSTER_STATE_PRIVATE=1, set by the ssh backend in copy mode) every worker does."""
    env = conf({"worker": ["a:1", "b:1"]}, "worker", 1)
    if private is not None:
        env["TFCLUSTER_STATE_PRIVATE"] = private
    assert task_from_env(env).keeps_own_backup(env) is expected
    chief = conf({"worker": ["a:1", "b:1"]}, "worker", 0)
    assert task_from_env(chief).keeps_own_backup(chief) is True


def test_no_tf_config_is_a_single_worker():
    task = task_from_env({})
    assert task.key == "worker:0" and task.is_chief and task.cluster == {}


def test_bad_tf_config():
    with pytest.raises(ConfigError, match="TF_CONFIG is not valid JSON"):
        task_from_env({"TF_CONFIG": "{not json"})


def test_flags():
    args = parse_args(["--epochs", "2", "--save-freq", "7", "--loop", "custom"])
    assert (args.epochs, args.save_freq, args.loop) == (2, 7, "custom")
    assert parse_args([]).save_freq == "epoch"


@pytest.mark.parametrize("argv", [["--save-freq", "0"], ["--save-freq", "often"], ["--epochs", "0"], ["--loop", "x"]])
def test_bad_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2
