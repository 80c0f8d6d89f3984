"""A standby's priority (launcher/contract/standbyprio.py) against the kernel: lowered in a thread of
its own, back to normal for every thread it made; the idle wait ends when told; the stub carries the
module's text."""

from __future__ import annotations

import os
import threading

import pytest

from launcher.contract import standbyprio
from launcher.contract.standbyprio import Priority, io_class, may_leave_idle, wait_idle


@pytest.mark.skipif(not may_leave_idle(), reason="needs CAP_SYS_NICE (root) to leave SCHED_IDLE")
def test_lower_then_restore_puts_every_thread_it_made_back_to_the_normal_priority():
    got = {}

    def lowered():
        prio = Priority()
        got["words"] = prio.lower()
        child_seen = {}
        child = threading.Thread(target=lambda: child_seen.update(
            low=(os.sched_getscheduler(0), io_class(0))))  # made while low: inherits it
        child.start()
        child.join()
        got["mine"] = (os.sched_getscheduler(0), io_class(0))
        got["child"] = child_seen["low"]
        keep = threading.Event()
        waiter = threading.Thread(target=keep.wait)  # alive across the restore
        waiter.start()
        prio.restore()
        got["after"] = (os.sched_getscheduler(0), io_class(0))
        got["waiter_after"] = (os.sched_getscheduler(waiter.native_id), io_class(waiter.native_id))
        keep.set()
        waiter.join()

    t = threading.Thread(target=lowered)
    t.start()
    t.join()
    assert got["words"] == "cpu=idle io=idle"
    assert got["mine"] == got["child"] == (os.SCHED_IDLE, 3)
    assert got["after"][0] == got["waiter_after"][0] == os.SCHED_OTHER
    assert got["after"][1] != 3 and got["waiter_after"][1] != 3
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the test's own thread never moved


def test_the_wait_for_an_idle_host_ends_at_once_when_promoted():
    stop = threading.Event()
    stop.set()
    assert wait_idle(until=float("inf"), stop=stop) is False


def test_the_standby_stub_carries_the_priority_module():
    from launcher.supervise.standby import _stub_source

    text = _stub_source()
    assert "# @STANDBYPRIO@" not in text and "def wait_as_standby(" in text
    assert "import launcher" not in open(standbyprio.__file__).read()  # (shipped as text: stdlib only)
    compile(text, "<string>", "exec")
