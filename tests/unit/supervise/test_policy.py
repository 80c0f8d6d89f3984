"""The supervisor's decisions as pure functions: group state, retry classification, backoff."""

from __future__ import annotations

import pytest

from launcher.system.procinfo import describe_exit
from launcher.supervise.policy import FAILED, RUNNING, SUCCEEDED, AttemptFailure, assess, backoff_delay, retry_decision

MWMS, PSS = "multi_worker_mirrored", "parameter_server"


@pytest.mark.parametrize(
    "exits, order, expected",
    [
        ({"worker:0": None, "worker:1": None}, [], (RUNNING, ())),
        ({"worker:0": 0, "worker:1": None}, ["worker:0"], (RUNNING, ())),
        ({"worker:0": 0, "worker:1": 0}, ["worker:1", "worker:0"], (SUCCEEDED, ())),
        ({"worker:0": None, "worker:1": 3}, ["worker:1"], (FAILED, ("worker:1",))),
        ({"worker:0": 137, "worker:1": 1}, ["worker:1", "worker:0"], (FAILED, ("worker:1", "worker:0"))),
        # the evaluator is a sidecar: it neither blocks success nor fails training
        ({"chief:0": 0, "worker:0": 0, "evaluator:0": None}, [], (SUCCEEDED, ())),
        ({"chief:0": None, "worker:0": None, "evaluator:0": 1}, ["evaluator:0"], (RUNNING, ())),
    ],
)
def test_mwms_group_state(exits, order, expected):
    verdict = assess(MWMS, "worker:0", exits, order)
    assert (verdict.state, verdict.failed) == expected


def test_mwms_sidecar_failure_is_reported():
    verdict = assess(MWMS, "chief:0", {"chief:0": None, "evaluator:0": 2}, ["evaluator:0"])
    assert verdict.sidecar_failed == ("evaluator:0",)


@pytest.mark.parametrize(
    "exits, state, failed, restart",
    [
        ({"chief:0": None, "worker:0": None, "ps:0": None}, RUNNING, (), ()),
        ({"chief:0": 0, "worker:0": None, "ps:0": None}, SUCCEEDED, (), ()),
        ({"chief:0": 1, "worker:0": None, "ps:0": None}, FAILED, ("chief:0",), ()),
        ({"chief:0": None, "worker:0": None, "ps:0": 137}, FAILED, ("ps:0",), ()),
        ({"chief:0": None, "worker:0": None, "ps:0": 0}, FAILED, ("ps:0",), ()),  # servers never exit on their own
        ({"chief:0": None, "worker:0": 137, "ps:0": None}, RUNNING, (), ("worker:0",)),
    ],
)
def test_pss_group_state(exits, state, failed, restart):
    verdict = assess(PSS, "chief:0", exits, [k for k, v in exits.items() if v is not None])
    assert (verdict.state, verdict.failed, verdict.restart_alone) == (state, failed, restart)


@pytest.mark.parametrize(
    "code, text",
    [(0, "exit code 0"), (3, "exit code 3"), (137, "killed by SIGKILL (exit 137)"), (143, "killed by SIGTERM (exit 143)"),
     (200, "exit code 200")],
)
def test_describe_exit(code, text):
    assert describe_exit(code) == text


PERMANENT = tuple(range(1, 128))


@pytest.mark.parametrize(
    "code, retryable",
    [(1, False), (2, False), (127, False), (3, False), (137, True), (143, True), (None, True)],
)
def test_retry_classification_kubeflow_style(code, retryable):
    ok, why = retry_decision(AttemptFailure("worker:0", "x", code), PERMANENT)
    assert ok is retryable
    if not ok:
        assert why.startswith("not retried:") and "permanent_exit_codes" in why


@pytest.mark.parametrize("code", [None, 137, 143, 3])
def test_a_final_failure_is_never_retried(code):
    """The backend can run no further attempt (errors.AttemptImpossible), whatever the code."""
    ok, why = retry_decision(AttemptFailure("prepare", "slurm: allocation job 7 was preempted", code, final=True), (1, 2))
    assert not ok and why == "not retried: slurm: allocation job 7 was preempted"


def test_retry_classification_is_configurable():
    """The same exit code is retried or not as restart.permanent_exit_codes lists it."""
    assert retry_decision(AttemptFailure("worker:0", "exit code 3", 3), (1, 2)) == (True, "exit code 3 is retryable")
    ok, why = retry_decision(AttemptFailure("worker:0", "exit code 3", 3), (1, 2, 3))
    assert not ok and why.startswith("not retried: exit code 3 is listed in restart.permanent_exit_codes"), why


def test_backoff_doubles_and_caps():
    assert [backoff_delay(n, 1.0, 5.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert backoff_delay(3, 0.0, 5.0) == 0.0


@pytest.mark.parametrize("exits, state", [
    ({"worker:0": None}, RUNNING),
    ({"worker:0": 0}, SUCCEEDED),
    ({"worker:0": 2}, FAILED),
    ({"worker:0": 143}, FAILED),
])
@pytest.mark.parametrize("strategy", ["mirrored", "central_storage", "one_device", "default", "tpu"])
def test_single_task_strategies_follow_their_one_task(strategy, exits, state):
    verdict = assess(strategy, "worker:0", exits, [k for k, v in exits.items() if v is not None])
    assert verdict.state == state and verdict.failed == (("worker:0",) if state == FAILED else ())


# The side of a partition that was cut off exits 1 too: its TensorFlow gave up on the
# coordination service it could no longer reach (the lab's partition test, whose run was once
# not retried: "worker:1: not retried: an uncaught error in the task (exit 1)").
CUT_OFF = ("Collective ops is aborted by: Deadline Exceeded",
           "RPC: /tensorflow.CoordinationService/Heartbeat",
           "The error could be from a previous operation. Restart your program to reset.")
GENUINE = ("Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
           "ZeroDivisionError: division by zero")


def test_an_exit_1_from_tensorflow_giving_up_on_a_lost_peer_is_retried_a_genuine_one_is_not():
    ok, why = retry_decision(AttemptFailure("worker:1", "exit code 1", 1, last_lines=CUT_OFF), (1, 2))
    assert ok and why == "worker:1's exit code 1 was TensorFlow aborting it for a lost peer (its last lines); retryable"
    ok, why = retry_decision(AttemptFailure("worker:1", "exit code 1", 1, last_lines=GENUINE), (1, 2))
    assert not ok and why.startswith("not retried: an uncaught error in the task (exit 1)")
