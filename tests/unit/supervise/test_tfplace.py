"""Where a task waits inside TensorFlow (launcher/supervise/tfplace.py) and the hang verdict it gives
(stuck.decide, hangwatch's reason) when every task waits there: the one in its input pipeline, a
save, an evaluation or a callback while the others wait in a collective is named with the frame
that tells; where every task is in its step, a TensorFlow thread blocked in the kernel (what
pyspy.thread_states adds, as a FIFO's open made it in a real run) tells; two odd ones, or the same
thread on every task, decide nothing."""

from __future__ import annotations

from launcher.backends.pyspy import THREADS as PYSPY_THREADS
from launcher.supervise.stuck import decide
from launcher.supervise.tfplace import (CALLBACK, COLLECTIVE, EVALUATION, INPUT, SAVE, STEP, THREADS, odd_one_out,
                                         place_of)

TF = "/venv/lib/python3.11/site-packages/tensorflow/python"
KERAS = "/venv/lib/python3.11/site-packages/tf_keras/src"


def stacks(*inner: tuple[str, str], threads: str = "") -> str:
    """faulthandler's text of a task: a beat thread, and the main thread with ``inner`` frames (file,
    function; innermost first) inside Keras fit, under the script's <module>."""
    frames = [*inner, (f"{KERAS}/engine/training.py", "fit"), ("/work/train.py", "<module>")]
    main = "\n".join(f'  File "{f}", line {n + 10} in {func}' for n, (f, func) in enumerate(frames))
    return (f'Thread 0x00007f17c4e2e6c0 (most recent call first):\n  File "<tfcluster-liveness>", line 115 in _beat\n\n'
            f"Thread 0x00007f181c1beb80 (most recent call first):\n{main}\n" + (f"\n{threads}\n" if threads else ""))


STEP_FRAMES = ((f"{TF}/eager/execute.py", "quick_execute"),
               (f"{TF}/eager/polymorphic_function/polymorphic_function.py", "__call__"))
COLLECTIVE_FRAMES = ((f"{TF}/eager/execute.py", "quick_execute"), (f"{TF}/ops/collective_ops.py", "all_reduce_v2"),
                     (f"{TF}/distribute/cross_device_ops.py", "reduce"))
TEARDOWN = ((f"{TF}/ops/gen_dataset_ops.py", "delete_iterator"), (f"{TF}/data/ops/iterator_ops.py", "__del__"))
SAVING = ((f"{TF}/checkpoint/checkpoint.py", "save"), (f"{KERAS}/callbacks.py", "on_epoch_end"))
EVALUATING = (*STEP_FRAMES, (f"{KERAS}/engine/training.py", "evaluate"))
CALLING_BACK = ((f"{KERAS}/callbacks.py", "on_train_batch_end"),)
FIFO = f"{PYSPY_THREADS}\n  tid 24301 tf_Compute: syscall 257 in wait_for_partner\n  tid 24302 tf_Compute: syscall 202 in futex_do_wait"
IDLE = f"{PYSPY_THREADS}\n  tid 24311 tf_Compute: syscall 202 in futex_do_wait"


def test_each_place_is_read_from_the_main_threads_innermost_telling_frame():
    assert place_of(stacks(*STEP_FRAMES)).place == STEP
    assert place_of(stacks(*COLLECTIVE_FRAMES)).place == COLLECTIVE
    teardown = place_of(stacks(*TEARDOWN))
    assert teardown.place == INPUT and teardown.frame.where() == "iterator_ops.py:11 in __del__()"
    assert place_of(stacks(*SAVING)).place == SAVE  # the save, not the callback that made it
    assert place_of(stacks(*EVALUATING)).place == EVALUATION
    assert place_of(stacks(*CALLING_BACK)).place == CALLBACK
    assert place_of("no stacks") is None
    assert THREADS == PYSPY_THREADS  # (the reader and the writer agree)


def test_the_one_in_its_input_pipeline_while_the_others_wait_in_a_collective_is_named():
    keys = ["worker:0", "worker:1", "worker:2"]
    texts = {"worker:0": stacks(*TEARDOWN), "worker:1": stacks(*COLLECTIVE_FRAMES), "worker:2": stacks(*STEP_FRAMES)}
    key, where, others = odd_one_out(keys, texts)
    assert (key, where.place, others) == ("worker:0", INPUT, "a collective or their step (its collective waits for "
                                                              "this task)")
    verdict = decide(keys, texts, {k: 7 for k in keys}, {})
    assert (verdict.key, verdict.why, verdict.place) == ("worker:0", "inside TensorFlow", INPUT), verdict
    assert verdict.frame.func == "__del__"


def test_a_save_an_evaluation_or_a_callback_is_the_odd_one_too():
    for frames, place in ((SAVING, SAVE), (EVALUATING, EVALUATION), (CALLING_BACK, CALLBACK)):
        texts = {"worker:0": stacks(*COLLECTIVE_FRAMES), "worker:1": stacks(*frames)}
        assert decide(["worker:0", "worker:1"], texts, {}, {}).place == place


def test_where_every_task_is_in_its_step_a_blocked_tensorflow_thread_tells():
    texts = {"worker:0": stacks(*STEP_FRAMES, threads=IDLE), "worker:1": stacks(*STEP_FRAMES, threads=FIFO)}
    verdict = decide(["worker:0", "worker:1"], texts, {"worker:0": 5, "worker:1": 5}, {})
    assert (verdict.key, verdict.place) == ("worker:1", INPUT), verdict
    assert verdict.detail == ("TensorFlow's thread tf_Compute (tid 24301) blocked in system call 257 (kernel wait "
                              "wait_for_partner)")
    # Its main thread without a Python frame (blocked in C, as a real run showed it): the thread tells.
    bare = ('Thread 0x00007f181c1beb80 (most recent call first):\n\n' + FIFO)
    verdict = decide(["worker:0", "worker:1"], {"worker:0": texts["worker:0"], "worker:1": bare}, {}, {})
    assert (verdict.key, verdict.place, verdict.frame) == ("worker:1", INPUT, None), verdict
    # The same blocked thread on every task is no evidence; nor are two odd ones.
    same = {k: stacks(*STEP_FRAMES, threads=FIFO) for k in ("worker:0", "worker:1")}
    assert decide(["worker:0", "worker:1"], same, {}, {}).key is None
    two = {"worker:0": stacks(*SAVING), "worker:1": stacks(*TEARDOWN), "worker:2": stacks(*COLLECTIVE_FRAMES)}
    assert decide(list(two), two, {}, {}).key is None


def test_user_code_and_the_count_still_come_first():
    user = stacks(("/work/train.py", "gen"), (f"{TF}/ops/script_ops.py", "__call__"))
    texts = {"worker:0": stacks(*TEARDOWN), "worker:1": user}
    assert decide(["worker:0", "worker:1"], texts, {}, {}).why == "user code"
    texts = {"worker:0": stacks(*TEARDOWN), "worker:1": stacks(*COLLECTIVE_FRAMES)}
    assert decide(["worker:0", "worker:1"], texts, {"worker:0": 9, "worker:1": 4}, {}).key == "worker:1"  # behind


def test_a_blocked_thread_comes_before_any_count_and_one_call_apart_is_no_evidence_against_a_place():
    """The stalled task, a thread of TensorFlow's blocked opening a FIFO, one call ahead of its
    peer waiting in its step (as a full test run saw it), or two (as another saw it: a count is a
    beat old): the blocked thread names it. A place alone (its main thread's frames in a teardown)
    yields to a count more than one call behind, not to one call; one call behind decides where
    the stacks do not."""
    keys = ["worker:0", "worker:1"]
    texts = {"worker:0": stacks(*STEP_FRAMES, threads=IDLE), "worker:1": stacks(*STEP_FRAMES, threads=FIFO)}
    for counts in ({"worker:0": 29, "worker:1": 30}, {"worker:0": 28, "worker:1": 30}, {"worker:0": 3, "worker:1": 30}):
        verdict = decide(keys, texts, counts, {})
        assert (verdict.key, verdict.why, verdict.place) == ("worker:1", "inside TensorFlow", INPUT), (counts, verdict)
        assert "wait_for_partner" in verdict.detail
    place = {"worker:0": stacks(*COLLECTIVE_FRAMES), "worker:1": stacks(*TEARDOWN)}
    assert decide(keys, place, {"worker:0": 29, "worker:1": 30}, {}).key == "worker:1"
    assert (decide(keys, place, {"worker:0": 28, "worker:1": 30}, {}).key,
            decide(keys, place, {"worker:0": 28, "worker:1": 30}, {}).why) == ("worker:0", "behind")
    alike = {k: stacks(*STEP_FRAMES, threads=IDLE) for k in keys}
    assert (decide(keys, alike, {"worker:0": 29, "worker:1": 30}, {}).key,
            decide(keys, alike, {"worker:0": 29, "worker:1": 30}, {}).why) == ("worker:0", "behind")
