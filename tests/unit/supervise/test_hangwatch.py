"""The hang watchdog's timing (launcher/supervise/hangwatch.py, policy.hang_limit): progress is the
beat's count (group.py, from the task's control channel), never output; auto's limit is max(120 s, 3 x the longest gap so far); the
clock starts at the first step (startup_timeout before it); tasks that report no count are never
called hung by auto."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.spec.model import Watchdog
from launcher.supervise.group import BEAT, RECORD, STACK, AttemptGroup
from launcher.supervise.hangwatch import HangWatch
from launcher.supervise.policy import AUTO_FLOOR, hang_limit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(setting, keys=("worker:0", "worker:1"), strategy="multi_worker_mirrored", startup=300.0):
    clock = Clock()
    group = AttemptGroup(clock)
    for key in keys:
        group.new_process(key)
        group.handles[key] = SimpleNamespace(state_note=lambda: "")
    hw = HangWatch(group=group, backend=None, record=None, plan=lambda: SimpleNamespace(strategy=strategy),
                   watchdog=Watchdog(hang_timeout=setting, startup_timeout=startup), clock=clock)
    return hw, group, clock


def beat(group, clock, key, n, at=None):
    if at is not None:
        clock.now = at
    return group.control(key, f"tfcluster-beat n={n}" + (" stacks=12 tf=1" if n == 0 else ""))


def test_auto_is_the_floor_until_long_gaps_were_seen_then_three_times_the_longest():
    assert hang_limit("auto", 0.0) == AUTO_FLOOR == 120.0
    assert hang_limit("auto", 25.0) == 120.0  # a legit 25 s pause seen: still the floor
    assert hang_limit("auto", 60.0) == 180.0
    assert hang_limit(40.0, 500.0) == 40.0 and hang_limit(0.0, 5.0) == 0.0
    # A run whose steps take 5 s: a stall is found 120 s after its last progress (within 5 minutes).
    assert hang_limit("auto", 5.0) <= 300.0


def test_a_legit_25_s_pause_is_not_a_hang_and_a_stall_is_found_at_the_limit():
    hw, group, clock = watch("auto")
    for key in ("worker:0", "worker:1"):
        beat(group, clock, key, 0, at=1000.0)
    since = 1010.0  # every task up
    for t in range(1020, 1100, 2):  # stepping, a beat every 2 s
        for key in ("worker:0", "worker:1"):
            beat(group, clock, key, t, at=float(t))
    assert hw.stalled(1098.0 + 25.0, {}, since) is None  # a 25 s pause (an upload in a callback)
    for key in ("worker:0", "worker:1"):
        beat(group, clock, key, 2000, at=1123.0)
    assert group.gaps["worker:0"] == 25.0
    assert hw.stalled(1123.0 + 119.0, {}, since) is None
    stall = hw.stalled(1123.0 + 121.0, {}, since)
    assert stall is not None and stall.keys == ("worker:0", "worker:1") and stall.limit == 120.0
    assert stall.what == "watchdog.hang_timeout=auto" and stall.since == 1123.0


def test_printing_is_not_progress_and_beats_are_not_lines():
    hw, group, clock = watch(10.0)
    assert beat(group, clock, "worker:0", 0, at=1000.0) == BEAT  # not the task's output, not even the first
    assert "worker:0" in group.takes_stacks
    assert beat(group, clock, "worker:0", 5, at=1001.0) == BEAT
    for t in range(1002, 1030):
        clock.now = float(t)
        group.line("worker:0", "fetching the next shard failed; retrying in 1 s")
        group.line("worker:0", f"record {t}: tfcluster-beat n={t} stacks=9 (from the dataset)")  # printed: data
    assert group.counts["worker:0"] == 5 and group.progress["worker:0"] == 1001.0
    stall = hw.stalled(1012.0, {}, 1000.0)
    assert stall is not None and stall.keys == ("worker:0",) and stall.what == "watchdog.hang_timeout=10"
    # A task that reports no count (worker:1 printed only) is no part of the count's watch...
    assert "worker:1" not in stall.keys
    # ...but with seconds, its silence is a hang as before (output); under auto never.
    clock.now = 1000.0
    group.line("worker:1", "hello")
    assert hw.silent(1011.0, {}, 1000.0) == "worker:1"
    hw_auto, group_auto, _ = watch("auto")
    assert hw_auto.silent(10_000.0, {}, 1000.0) is None


def test_before_the_first_step_startup_timeout_governs_and_servers_that_never_step_are_not_watched():
    hw, group, clock = watch("auto", startup=60.0)
    for key in ("worker:0", "worker:1"):
        beat(group, clock, key, 0, at=1000.0)
    assert hw.stalled(1059.0, {}, 1000.0) is None
    stall = hw.stalled(1061.0, {}, 1000.0)
    assert stall is not None and stall.what.startswith("watchdog.startup_timeout")
    # Once one task steps, one that never does (a server) is not called hung.
    beat(group, clock, "worker:0", 3, at=1061.0)
    assert hw.stalled(1061.0 + 119.0, {}, 1000.0) is None
    assert hw.stalled(1061.0 + 121.0, {}, 1000.0).keys == ("worker:0",)
    # PSS's ps and workers, and the evaluator, are never watched by their count.
    hw, group, clock = watch("auto", keys=("chief:0", "ps:0", "evaluator:0"), strategy="parameter_server")
    for key in ("chief:0", "ps:0", "evaluator:0"):
        beat(group, clock, key, 0, at=1000.0)
        beat(group, clock, key, 1, at=1001.0)
    assert hw.stalled(1001.0 + 121.0, {}, 1000.0).keys == ("chief:0",)


def test_a_python_task_that_never_imports_tensorflow_is_watched_by_its_output_not_its_count():
    hw, group, clock = watch(10.0, startup=30.0)
    for key in ("worker:0", "worker:1"):
        clock.now = 1000.0
        group.control(key, "tfcluster-beat n=0 stacks=12")  # the stub's first beat: no TensorFlow yet
    assert not group.counting and hw.stalled(99_999.0, {}, 1000.0) is None
    assert hw.silent(1011.0, {}, 1000.0) == "worker:0"  # seconds: its silence, as before
    hw, group, clock = watch("auto", startup=30.0)
    clock.now = 1000.0
    group.control("worker:0", "tfcluster-beat n=0 stacks=12")
    assert hw.stalled(99_999.0, {}, 1000.0) is None and hw.silent(99_999.0, {}, 1000.0) is None
    group.control("worker:0", "tfcluster-beat n=0 tf=1")  # it imported TensorFlow: startup_timeout for a first step
    assert hw.stalled(1031.0, {}, 1000.0).what.startswith("watchdog.startup_timeout")


def test_off_and_exited_tasks_are_never_stalled():
    hw, group, clock = watch(0.0)
    beat(group, clock, "worker:0", 0, at=1000.0)
    beat(group, clock, "worker:0", 1, at=1001.0)
    assert hw.stalled(99_999.0, {}, 1000.0) is None
    hw, group, clock = watch(5.0)
    beat(group, clock, "worker:0", 0, at=1000.0)
    beat(group, clock, "worker:0", 1, at=1001.0)
    assert hw.stalled(1010.0, {"worker:0": 0}, 1000.0) is None


@pytest.mark.parametrize("line", ["partial progress bar tfcluster-beat n=7", "tfcluster-beat n=7 stacks=9",
                                  "record 42: tfcluster-beat n=0 stacks=100 (from the dataset)"])
def test_a_printed_beat_is_the_tasks_line_kept_whole_and_never_read(line):
    hw, group, clock = watch(5.0)
    beat(group, clock, "worker:0", 0, at=1000.0)
    clock.now = 1003.0
    assert group.line("worker:0", line) is None
    assert group.counts["worker:0"] == 0 and "worker:0" not in group.progress
    assert list(group.tails["worker:0"])[-1:] == [line]


def test_the_stacks_signal_is_tfclusters_whatever_a_beat_names():
    """A beat that names another signal is not tfcluster's liveness: its task is never sent one;
    a task that names the stacks' signal is sent that one, the only one ever sent."""
    hw, group, clock = watch(5.0)
    assert group.control("worker:0", "tfcluster-beat n=0 stacks=9") == BEAT
    assert group.control("worker:1", "tfcluster-beat n=0 stacks=100") == BEAT
    assert group.takes_stacks == set()
    group.control("worker:1", "tfcluster-beat n=0 stacks=12")
    sent = []
    group.handles["worker:1"] = SimpleNamespace(signal_process=sent.append)
    group.signal_processes(["worker:1"])
    assert sent == [12]
    # A handle whose signal fails (a host's garbage answer, a gone process) costs the others nothing.
    group.handles["worker:0"] = SimpleNamespace(signal_process=lambda sig: (_ for _ in ()).throw(OSError(22, "EINVAL")))
    group.signal_processes(["worker:0", "worker:1"])
    assert sent == [12, 12]


def test_stack_lines_are_kept_aside_only_while_asked_for():
    hw, group, clock = watch(5.0)
    header = "Current thread 0x00007f68b064ab80 (most recent call first):"
    assert group.control("worker:0", header) == STACK  # (not asked for: dropped)
    group.collect(["worker:0"])
    group.line("worker:0", header)  # printed: the task's own line, never its stacks
    assert group.control("worker:0", header) == STACK
    assert group.control("worker:0", '  File "/home/me/train.py", line 9 in examples') == STACK
    assert group.control("worker:0", "tfcluster-epoch epoch=1") == RECORD
    assert group.collected() == {"worker:0": header + '\n  File "/home/me/train.py", line 9 in examples'}
    assert group.control("worker:0", header) == STACK and group.collected() == {}


def test_the_quoted_line_drops_its_comment_and_padding_and_escapes_what_it_holds(tmp_path):
    """The failure line quotes the stuck statement as code: a trailing comment and the padding
    before it go (a '#' inside a string stays), control characters are escaped (the user's file
    is outside bytes), a long line is cut, and a file not readable here quotes nothing."""
    from launcher.supervise.hangwatch import code_at

    path = tmp_path / "train.py"
    path.write_text("x = 1\n    lock.acquire()          # second acquire: deadlock\n"
                    "print('a # b')  # c\nt = '\x1b]0;owned\x07'\n" + "y = " + "1 + " * 100 + "1\n")
    assert code_at(str(path), 2) == "lock.acquire()"
    assert code_at(str(path), 3) == "print('a # b')"
    assert "\x1b" not in code_at(str(path), 4) and "\\x1b]0;owned" in code_at(str(path), 4)
    assert len(code_at(str(path), 5, limit=60)) < 100 and "characters cut" in code_at(str(path), 5, limit=60)
    assert code_at(str(tmp_path / "gone.py"), 1) == ""


def test_the_tasks_states_and_the_stacks_signal_are_asked_of_every_host_at_once():
    """On ssh each state note and each stacks' signal is a round trip to the task's host: a hang's
    finding asks them all at once, not one host after another. Each fake handle waits at a barrier
    of all 12: asked one by one, the first would wait alone and break it."""
    import threading

    keys = [f"worker:{i}" for i in range(12)]
    barrier = threading.Barrier(len(keys), timeout=10)
    sent: dict[str, int] = {}
    group = AttemptGroup(Clock())
    for key in keys:
        group.handles[key] = SimpleNamespace(
            state_note=lambda k=key: (barrier.wait(), "process is stopped (SIGSTOP?)" if k == "worker:3" else "")[1],
            signal_process=lambda sig, k=key: (barrier.wait(), sent.__setitem__(k, sig)))
    assert group.state_notes(keys) == {k: ("process is stopped (SIGSTOP?)" if k == "worker:3" else "") for k in keys}
    barrier.reset()
    group.signal_processes(keys)
    assert sent == {k: 12 for k in keys}
    barrier.reset()
    hw = HangWatch(group=group, backend=None, record=None, plan=lambda: SimpleNamespace(strategy="multi_worker_mirrored"),
                   watchdog=Watchdog(hang_timeout=30.0, startup_timeout=300.0), clock=group.clock)
    for key in keys:
        group.activity[key] = 900.0  # all silent for 100 s, none counting: the stopped one is named
    assert hw.silent(1000.0, {}, since=800.0) == "worker:3"


def test_a_task_inside_tensorflow_is_said_with_its_place_and_what_tells():
    from launcher.supervise.hangwatch import Stall
    from launcher.supervise.stuck import Culprit, Frame

    hw, _, _ = watch(20)
    stall = Stall(("worker:0",), 21.4, 20.0, 1000.0, "watchdog.hang_timeout=20")
    frame = Frame("/venv/site-packages/tensorflow/python/data/ops/iterator_ops.py", 823, "__del__")
    said = hw.reason(Culprit("worker:0", "inside TensorFlow", frame, "its input pipeline", "a collective"), stall, {})
    assert said == ("stuck 21 s inside TensorFlow, in its input pipeline at iterator_ops.py:823 in __del__(), while "
                    "the others wait in a collective (limit 20 s: watchdog.hang_timeout=20)")
    thread = Culprit("worker:1", "inside TensorFlow", None, "its input pipeline", "their step",
                     "TensorFlow's thread tf_Compute (tid 7) blocked in system call 0 (kernel wait pipe_read)")
    assert hw.reason(thread, stall, {}).startswith(
        "stuck 21 s inside TensorFlow, in its input pipeline: TensorFlow's thread tf_Compute (tid 7) blocked in "
        "system call 0 (kernel wait pipe_read), while the others wait in their step")


def test_a_task_behind_in_its_count_is_said_with_the_counts():
    from launcher.supervise.hangwatch import Stall
    from launcher.supervise.stuck import Culprit

    hw, _, _ = watch(20)
    stall = Stall(("worker:0",), 21.4, 20.0, 1000.0, "watchdog.hang_timeout=20")
    said = hw.reason(Culprit("worker:1", "behind", None, detail="41 calls, the next 43"), stall, {})
    assert said == ("stuck 21 s, behind the others in its count of TensorFlow calls (41 calls, the next 43) "
                    "(limit 20 s: watchdog.hang_timeout=20)")
