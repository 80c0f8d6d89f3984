import pytest

from launcher.contract.progress import KINDS, Progress, ResultLine, StartLine, StepLine, format_line, parse


@pytest.mark.parametrize("line, kind, fields", [
    ("tfcluster-epoch epoch=2 loss=0.4123 accuracy=0.8810", "epoch",
     {"epoch": "2", "loss": "0.4123", "accuracy": "0.8810"}),
    ("  tfcluster-first_step epoch=0 step=0 time=1700000000.125\n", "first_step",
     {"epoch": "0", "step": "0", "time": "1700000000.125"}),
    ("tfcluster-standby promoted", "standby", {}),
    ("tfcluster-eval_done reason=timeout timeout=2 evaluated=0", "eval_done",
     {"reason": "timeout", "timeout": "2", "evaluated": "0"}),
])
def test_parse_progress_lines(line, kind, fields):
    p = parse(line)
    assert p is not None and p.kind == kind and dict(p.fields) == fields


@pytest.mark.parametrize("line", [
    "worker: SIGTERM received", "I0000 tfcluster-epoch epoch=1", "tfcluster-", "tfcluster-bad!kind x=1", "",
])
def test_other_lines_are_not_progress(line):
    assert parse(line) is None


def test_numbers_are_finite_or_none():
    p = parse("tfcluster-epoch loss=nan accuracy=0.5 step=12 after=7.5s name=x")
    assert p.number("accuracy") == 0.5 and p.integer("step") == 12 and p.number("after") == 7.5
    assert p.number("loss") is None and p.number("name") is None and p.number("missing") is None


def test_format_line_round_trips():
    line = format_line("result", task="worker:0", accuracy="0.9111")
    assert line == "tfcluster-result task=worker:0 accuracy=0.9111"
    assert parse(line) == ResultLine.of({"task": "worker:0", "accuracy": "0.9111"})


def test_a_known_kind_is_its_class_with_typed_fields_and_an_unknown_one_a_plain_record():
    step = parse("tfcluster-step epoch=1 step=20 global_step=40 loss=0.5123 accuracy=nan time=1700000000.5 extra=x")
    assert isinstance(step, StepLine) and step.kind == "step"
    assert (step.epoch, step.step, step.global_step, step.loss, step.accuracy, step.time) == (
        1, 20, 40, 0.5123, None, 1700000000.5)
    assert step.fields["extra"] == "x" and step.get("accuracy") == "nan"  # (as printed)
    start = parse("tfcluster-start epoch=0 strategy=mirrored replicas=two global_batch=64")
    assert isinstance(start, StartLine) and (start.strategy, start.replicas, start.global_batch) == ("mirrored", None, 64)
    assert [type(parse(f"tfcluster-{kind} x=1")) for kind in KINDS] == list(KINDS.values())
    other = parse("tfcluster-standby promoted")
    assert type(other) is Progress and other.kind == "standby"
    assert not isinstance(parse("tfcluster-first_step step=0"), StepLine)  # (its own class: its step is an index)
