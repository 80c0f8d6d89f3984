"""launcher/notices.py: the sink a backend says things through, and the console that fills it."""

from __future__ import annotations

import io

from launcher.notices import Notices, PlainNotices
from launcher.ui.console import Console


def _said(notices: Notices) -> None:
    notices.info("pulling image a\x1b]0;title\x07b")
    notices.error("host x: gone\nfor good")
    notices.block(["  | line one", "  | line two"])
    with notices.countdown(lambda: "waiting 3 s"):
        pass


def test_plain_notices_write_the_lines_the_console_writes_off_a_terminal():
    plain, err = io.StringIO(), io.StringIO()
    _said(PlainNotices(plain))
    _said(Console(out=io.StringIO(), err=err, color=False))
    assert plain.getvalue() == err.getvalue()
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("tfcluster: pulling image a") and "\x1b" not in lines[0] and "\x07" not in lines[0]
    assert lines[1].startswith("tfcluster: error: host x: gone") and len(lines) == 4  # one line per message
    assert lines[2:] == ["  | line one", "  | line two"]


def test_a_notice_that_cannot_be_written_is_dropped():
    closed = io.StringIO()
    closed.close()
    PlainNotices(closed).info("nowhere to go")  # no exception: a notice never stops a run


# -------------------------------------------------------------- many hosts, one line

def test_what_many_hosts_found_alike_is_one_line_and_a_host_alone_keeps_its_own():
    from launcher.notices import HostNote, fold_hosts

    notes = [HostNote(f"h{i}", f"no GPU found (h{i}: none): its 1 GPU task runs on CPU",
                      "no GPU found on {hosts}: tasks run on CPU") for i in range(64, 0, -1)]
    notes.append(HostNote("big", "big: 8 GPUs (H100) for worker:0", "{hosts}: 8 GPUs (H100) each"))
    assert fold_hosts(notes) == ["no GPU found on 64 hosts (h1…h64): tasks run on CPU",
                                 "big: 8 GPUs (H100) for worker:0"]
    assert fold_hosts(notes[:1]) == ["no GPU found (h64: none): its 1 GPU task runs on CPU"]
    assert fold_hosts([]) == []


def test_host_lists_are_short_in_natural_order_with_runs_and_a_bound():
    from launcher.notices import host_list

    assert host_list(["h10", "h9", "h8", "h2", "h1"]) == "h1, h2, h8…h10"
    assert host_list(["gpu-a", "gpu-b", "n01", "n02", "n03"]) == "gpu-a, gpu-b, n01, n02, n03"  # (01: no run)
    assert host_list([f"r{i}h1" for i in range(1, 9)]) == "r1h1, r2h1, r3h1, r4h1, r5h1, r6h1 and 2 more"
    assert host_list([f"h{i}" for i in range(1, 200) if i % 10]) .startswith("h1…h9, h11…h19")


def test_a_tally_says_how_far_a_wait_over_hosts_got_and_a_terminal_alone_shows_it():
    import threading

    from launcher.notices import Tally

    tally = Tally("probing hosts", 64)
    threads = [threading.Thread(target=tally.one) for _ in range(37)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tally.text() == "probing hosts 37/64"
    tally.next("checking reachability from hosts")
    assert tally.text() == "checking reachability from hosts 0/64"
    # Off a terminal (a pipe, a file) the count is never written: no progress lines in a log.
    err = io.StringIO()
    with Console(out=io.StringIO(), err=err, color=False).countdown(tally.text):
        tally.one()
    assert err.getvalue() == ""
