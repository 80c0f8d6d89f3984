"""launcher/contract/progress.py owns the progress-line format, the fast read of the worker's step lines
(``step_shape``, what ``RunModel.lines`` skips by) included: it accepts exactly the worker's own
step lines (as ``format_line`` writes them) and agrees with ``parse`` on each one it accepts."""

import random

import pytest

from launcher.contract.progress import format_line, parse, step_shape


def test_the_workers_step_lines_are_read_as_parse_reads_them():
    rng = random.Random(7)
    for _ in range(2000):
        g, t = rng.randrange(0, 10**6), rng.uniform(1.7e9, 1.8e9)
        fields = {"epoch": g // 50, "step": g % 50, "global_step": g}
        if rng.random() < 0.7:
            fields.update(loss=f"{rng.uniform(0, 5):.4f}", accuracy=f"{rng.uniform(0, 1):.4f}")
        line = format_line("step", **fields, time=f"{t:.3f}")
        shape = step_shape(line)
        p = parse(line)
        assert shape == ("loss" in fields, p.integer("global_step"), p.number("time")), line


@pytest.mark.parametrize("line", [
    "tfcluster-step epoch=0 step=1 global_step=1 loss=0.5 accuracy=1.7 time=1.0",   # accuracy out of range
    "tfcluster-step epoch=0 step=1 global_step=1 loss=nan accuracy=0.5 time=1.0",   # not a number
    "tfcluster-step epoch=0 global_step=1 loss=0.5 time=1.0",                       # a user's own
    "tfcluster-step epoch=0 step=1 global_step=1 time=1.0 ",                        # trailing space
    "tfcluster-epoch epoch=0 global_step=1 time=1.0",                               # another kind
    "worker says tfcluster-step epoch=0 step=1 global_step=1 time=1.0",
])
def test_anything_else_is_left_to_parse(line):
    assert step_shape(line) is None
