"""The local tests shared out among the suite's pytests (tests/support/shardqueue.py): each file run
by exactly one of them, whole, after that pytest's own tests; what none ran is named."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.shardqueue import ordered, unclaimed


@dataclass(frozen=True)
class Item:
    nodeid: str


LAB = [Item("tests/integration/ssh/test_a.py::t1"), Item("tests/integration/ssh/test_a.py::t2")]
LOCAL = [Item(f"tests/unit/test_{f}.py::t{n}") for f in "xyz" for n in (1, 2)]


def shared(item) -> bool:
    return item.nodeid.startswith("tests/unit/")


def test_each_local_file_runs_whole_in_the_one_pytest_that_claims_it_first(tmp_path):
    # Two pytests at once, interleaved one item at a time: the second comes free first (no own
    # tests) and claims a file as it is about to run it, the first after its own lab tests.
    first = ordered(LAB + LOCAL, shared, tmp_path)
    second = ordered(LOCAL, shared, tmp_path)
    ran = {"first": [], "second": []}
    live = {"first": first, "second": second}
    while live:
        for name in list(live):
            item = next(live[name], None)
            if item is None:
                del live[name]
            else:
                ran[name].append(item.nodeid)
    assert ran["first"][:2] == [i.nodeid for i in LAB]  # its own, first and in order
    local_ran = sorted(ran["first"][2:] + ran["second"])
    assert local_ran == sorted(i.nodeid for i in LOCAL)  # each once: none twice, none left out
    for name in ran:
        files = [n.split("::")[0] for n in ran[name] if n.startswith("tests/unit/")]
        assert all(files.count(f) == 2 for f in files), ran  # a file's tests together, in one pytest
    assert ran["second"] and ran["first"][2:], ran  # both took a share
    assert unclaimed(tmp_path) == []


def test_a_file_no_pytest_reached_is_named(tmp_path):
    run = ordered(LOCAL, shared, tmp_path)
    assert next(run).nodeid == "tests/unit/test_x.py::t1"  # (then it stopped: e.g. -x)
    assert unclaimed(tmp_path) == ["tests/unit/test_y.py", "tests/unit/test_z.py"]
