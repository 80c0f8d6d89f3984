"""launcher/ui/peoplelines.py: the tasks' progress protocol as the lines a person reads above the panel."""

from __future__ import annotations

from launcher.ui.peoplelines import PeopleLines, compact_keys

START = "tfcluster-start epoch=0 step=0 global_step=0 time=1.0 strategy={s} strategy_class=a.b.{c} replicas=3 " \
        "global_batch=96 epochs=3 steps_per_epoch=10"
EPOCH = "tfcluster-epoch epoch={e} global_step={g} loss={l} accuracy={a} examples_per_sec={r} learning_rate=0.001 time=2.0"


def _feed(people: PeopleLines, lines) -> list:
    out = []
    for key, line in lines:
        out += (people.progress if "tfcluster-" in line[:30] else people.feed)(key, line)
    return out


def test_an_epoch_is_one_line_once_every_training_task_reported_it():
    people = PeopleLines()
    keys = ("worker:0", "worker:1", "worker:2")
    out = _feed(people, [(k, START.format(s="multi_worker_mirrored", c="CollectiveAllReduceStrategy")) for k in keys])
    assert out == [(None, "strategy multi_worker_mirrored (CollectiveAllReduceStrategy, 3 replica(s), global batch 96)")]
    assert _feed(people, [("worker:0", EPOCH.format(e=1, g=10, l=0.5, a=0.8, r=1000.0)),
                          ("worker:2", EPOCH.format(e=1, g=10, l=0.5, a=0.8, r=1200.0))]) == []  # worker:1 still due
    assert people.progress("worker:1", EPOCH.format(e=1, g=10, l=0.5, a=0.8, r=1100.0)) == [
        (None, "epoch 1/3  loss 0.5000  accuracy 0.800  1,100 ex/s  (worker:0-2)")]


def test_a_task_that_never_reports_delays_an_epoch_only_until_the_next_one():
    people = PeopleLines()
    _feed(people, [(k, START.format(s="parameter_server", c="ParameterServerStrategyV2"))
                   for k in ("chief:0", "worker:0", "worker:1")])
    assert people.progress("chief:0", EPOCH.format(e=1, g=10, l=0.9, a=0.5, r=50)) == []
    # Epoch 2 shows epoch 1; from then on the chief alone is expected (it alone reported the last
    # epoch shown), so epoch 2 and every later one show at once.
    assert people.progress("chief:0", EPOCH.format(e=2, g=20, l=0.7, a=0.6, r=60)) == [
        (None, "epoch 1/3  loss 0.9000  accuracy 0.500  50 ex/s  (chief:0)"),
        (None, "epoch 2/3  loss 0.7000  accuracy 0.600  60 ex/s  (chief:0)")]
    assert people.progress("chief:0", EPOCH.format(e=3, g=30, l=0.6, a=0.7, r=60)) == [
        (None, "epoch 3/3  loss 0.6000  accuracy 0.700  60 ex/s  (chief:0)")]


def test_script_output_passes_as_it_is_heartbeats_vanish_and_a_restart_shows_the_epochs_again():
    people = PeopleLines()
    assert people.feed("worker:0", "Epoch 1: my own print") == [("worker:0", "Epoch 1: my own print")]
    assert people.feed("worker:0", "Traceback (most recent call last):") == [
        ("worker:0", "Traceback (most recent call last):")]
    assert people.progress("worker:0", "tfcluster-step epoch=0 step=1 global_step=1 time=1.0") == []
    assert people.progress("worker:0", "tfcluster-custom x=1") == [("worker:0", "custom x 1")]  # (in words)
    # A line a task printed is its text, never a record, whatever it looks like:
    assert people.feed("worker:0", "tfcluster-epoch epoch=9 loss=0.1") == [("worker:0", "tfcluster-epoch epoch=9 loss=0.1")]
    start = START.format(s="multi_worker_mirrored", c="C")
    _feed(people, [("worker:0", start), ("worker:1", start)])
    line = EPOCH.format(e=1, g=10, l=0.5, a=0.8, r=10)
    assert len(_feed(people, [("worker:0", line), ("worker:1", line)])) == 1
    # A new attempt (a second start from the same task) resumes at epoch 1: shown again, strategy not.
    assert _feed(people, [("worker:0", start), ("worker:1", start)]) == []
    assert len(_feed(people, [("worker:0", line), ("worker:1", line)])) == 1
    assert people.progress("worker:0", "tfcluster-preempted epoch=1 step=4 global_step=14 saved=/s/ckpt") == [
        ("worker:0", "preempted at epoch 1 step 4; saved to /s/ckpt")]
    assert people.progress("evaluator:0", "tfcluster-eval checkpoint=ckpt-002 global_step=20 loss=0.3000 accuracy=0.9100") \
        == [("evaluator:0", "evaluated ckpt-002  loss 0.3000  accuracy 0.910")]


def test_results_and_what_is_left_at_the_end():
    people = PeopleLines()
    start = START.format(s="multi_worker_mirrored", c="C")
    _feed(people, [("worker:0", start), ("worker:1", start)])
    result = "tfcluster-result task={k} epochs=3 epochs_run=3 steps_run=30 examples_per_sec=900.0 accuracy=0.9500 loss=0.1500"
    assert people.progress("worker:0", result.format(k="worker:0")) == []
    assert people.progress("worker:0", EPOCH.format(e=3, g=30, l=0.2, a=0.9, r=10)) == []
    assert people.flush() == [(None, "epoch 3/3  loss 0.2000  accuracy 0.900  10 ex/s  (worker:0)"),
                              (None, "result  loss 0.1500  accuracy 0.950  900 ex/s  (worker:0)")]


def test_compact_keys():
    assert compact_keys(["worker:1", "worker:0"]) == "worker:0-1"
    assert compact_keys(["worker:5", "chief:0", "worker:0", "worker:1", "worker:2"]) == "chief:0, worker:0-2,5"
    assert compact_keys(["evaluator:0", "ps:1", "ps:0"]) == "ps:0-1, evaluator:0"


def _fed(people: PeopleLines, lines: list[tuple[str, str]]) -> list:
    out = []
    for key, line in lines:
        out += (people.progress if "tfcluster-" in line[:30] else people.feed)(key, line)
    return out


def test_the_workers_start_up_lines_are_one_line_for_the_run_and_a_standby_protocol_none():
    tasks = ("worker:0", "worker:1")
    people = PeopleLines(tasks=lambda: tasks)
    out = _fed(people, [
        ("worker:0", "worker: worker:0 strategy=multi_worker_mirrored loop=fit epochs=3"),
        ("worker:0", "worker: collective implementation=auto timeout=none"),
        ("worker:1", "worker: worker:1 strategy=multi_worker_mirrored loop=fit epochs=3"),
        ("worker:1", "worker: collective implementation=auto timeout=none"),
        ("worker:1", "my own line"),
        ("worker:0", "worker: error: something"),
        ("worker:1", "(standby) tfcluster-standby waiting"),
        ("worker:1", "(standby) tfcluster-standby ready after=3.1s"),
    ])
    assert out == [
        (None, "worker: strategy=multi_worker_mirrored loop=fit epochs=3  (worker:0-1)"),
        (None, "worker: collective implementation=auto timeout=none  (worker:0-1)"),
        ("worker:1", "my own line"),
        ("worker:0", "worker: error: something"),
    ]


def test_a_start_up_line_not_every_task_says_is_shown_when_training_starts_or_at_the_end():
    people = PeopleLines(tasks=lambda: ("worker:0", "worker:1", "evaluator:0"))
    out = _fed(people, [
        ("worker:0", "worker: worker:0 gpus: none"),
        ("worker:1", "worker: worker:1 gpus: none"),
        ("worker:0", "tfcluster-start strategy=multi_worker_mirrored epochs=2"),
        ("worker:1", "worker: worker:1 gpus: none"),  # (again: a straggler, already shown)
        ("evaluator:0", "worker: evaluator:0 watching /state"),
    ])
    assert out[0] == (None, "worker: gpus: none  (worker:0-1)")
    assert people.flush() == [(None, "worker: watching /state  (evaluator:0)")]
