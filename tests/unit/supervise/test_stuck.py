"""Which task stopped the group, from its stacks (launcher/supervise/stuck.py), on the stacks real runs
took: a user's own MWMS Keras fit script on 2 local workers (tests/support/hang_script.py), each way
it stops making progress, captured by the hang watchdog into the record (data/stacks/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.supervise.stuck import Frame, decide, in_user_code, is_stack_line, kind, parse

DATA = Path(__file__).parent / "data" / "stacks"
KEYS = ("worker:0", "worker:1")


def stacks(case: str) -> dict[str, str]:
    return {k: (DATA / f"{case}-{k.replace(':', '-')}.txt").read_text() for k in KEYS}


@pytest.mark.parametrize("case,key,where", [
    # its generator (the from_generator thread TF called into) retries while printing; worker:0 waits in TF
    ("generator", "worker:1", "train.py:45 in retry_forever()"),
    # its generator sleeps silently while a metrics thread prints on every worker (the same line: no evidence)
    ("silent", "worker:1", "train.py:49 in silent_stall()"),
    # a callback's busy loop on worker:1
    ("busy", "worker:1", "train.py:78 in on_train_batch_end()"),
    # a callback's deadlock on worker:0: the innocent worker:1 waits in the all-reduce
    ("deadlock0", "worker:0", "train.py:82 in on_train_batch_end()"),
])
def test_the_task_in_user_code_is_named_with_its_innermost_user_frame(case, key, where):
    verdict = decide(KEYS, stacks(case), {"worker:0": 30, "worker:1": 30}, {})
    assert verdict.key == key and verdict.why == "user code"
    assert verdict.frame.where() == where


def test_a_thread_that_every_task_shows_alike_is_no_evidence():
    text = stacks("silent")
    metrics = [f for k in KEYS for f in (in_user_code(t) for t in parse(text[k])) if f and f.func == "metrics_thread"]
    assert len(metrics) == 2 and metrics[0].line == metrics[1].line  # both workers print from the same line
    # Without worker:1's stalled generator, nothing is left that tells them apart: undecided, no guess.
    innocent = {"worker:0": text["worker:0"], "worker:1": text["worker:0"]}
    verdict = decide(KEYS, innocent, {"worker:0": 30, "worker:1": 30}, {})
    assert verdict.key is None and "waits inside TensorFlow" in verdict.why


def test_a_stopped_process_comes_first_and_a_lower_count_decides_when_stacks_do_not():
    assert decide(KEYS, stacks("generator"), {}, {"worker:0": "process is stopped (SIGSTOP?)"}).key == "worker:0"
    waiting = stacks("generator")["worker:0"]
    verdict = decide(KEYS, {"worker:0": waiting, "worker:1": waiting}, {"worker:0": 31, "worker:1": 30}, {})
    assert (verdict.key, verdict.why) == ("worker:1", "behind")
    assert verdict.detail == "30 calls, the next 31"  # (the failure's words say the counts it went by)
    # Several in user code (not alike), one behind: that one.
    both = {"worker:0": stacks("deadlock0")["worker:0"], "worker:1": stacks("busy")["worker:1"]}
    assert decide(KEYS, both, {"worker:0": 12, "worker:1": 11}, {}).key == "worker:1"
    undecided = decide(KEYS, both, {"worker:0": 12, "worker:1": 12}, {})
    assert undecided.key is None and "worker:0, worker:1 all sit in code of their own" in undecided.why
    assert decide(KEYS, {}, {}, {}).why == "no stacks came, and no task is behind the others"


def test_frames_are_told_apart_by_where_they_live():
    threads = parse(stacks("generator")["worker:1"])
    assert len(threads) == 3 and all(t.frames for t in threads)
    assert kind(Frame("/work/venv/lib/python3.11/site-packages/tensorflow/python/eager/context.py", 1, "f")) == "tf"
    assert kind(Frame("/work/venv/lib/python3.11/site-packages/tf_keras/src/callbacks.py", 1, "f")) == "tf"
    assert kind(Frame("/usr/lib/python3.11/threading.py", 1, "run")) == "library"
    assert kind(Frame("/venv/lib/python3.11/site-packages/requests/api.py", 1, "get")) == "library"
    assert kind(Frame("<tfcluster-liveness>", 1, "_beat")) == "ours"
    assert kind(Frame("/home/me/train.py", 1, "examples")) == "user"
    # A generator blocked in a download sits in its own code: libraries are passed over.
    from launcher.supervise.stuck import Thread
    download = Thread("0x1", (Frame("/v/lib/python3.11/socket.py", 1, "recv"),
                              Frame("/v/lib/python3.11/site-packages/requests/api.py", 2, "get"),
                              Frame("/home/me/train.py", 9, "examples"),
                              Frame("/v/lib/python3.11/site-packages/tensorflow/python/ops/script_ops.py", 3, "__call__")))
    assert in_user_code(download) == Frame("/home/me/train.py", 9, "examples")
    assert is_stack_line('  File "/home/me/train.py", line 9 in examples')
    assert is_stack_line("Current thread 0x00007f68b064ab80 (most recent call first):")
    assert not is_stack_line("fetching the next shard failed; retrying in 1 s")
