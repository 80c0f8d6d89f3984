import pytest

from launcher.contract.progress import Progress, format_line, parse


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
    assert parse(line) == Progress("result", {"task": "worker:0", "accuracy": "0.9111"})
