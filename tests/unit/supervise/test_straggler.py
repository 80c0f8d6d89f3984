"""launcher/supervise/straggler.py against fakes: who is behind, by the strategy's own rule, and only
when it holds for HOLD samples in a row (named once; its catching up said once)."""

from __future__ import annotations

from launcher.supervise.group import AttemptGroup
from launcher.supervise.straggler import EVERY, HOLD, Lag, Sample, Stragglers, behind


def pss(at, **rates):
    return Sample(at, {}, {}, {f"worker:{k[1:]}": int(at * r) for k, r in rates.items()})


def mwms(at, **shares):
    return Sample(at, {f"worker:{k[1:]}": int(at * 10) for k in shares},
                  {f"worker:{k[1:]}": at * s for k, s in shares.items()}, {})


def test_a_parameter_server_worker_well_below_the_others_median_rate_is_behind():
    lag = behind(pss(0, w0=10, w1=10, w2=12, w3=6), pss(30, w0=10, w1=10, w2=12, w3=6), "parameter_server")
    assert lag == Lag("worker:3", "40 % slower than the median of the other workers (6.0 against 10.0 calls/s over 30 s)")
    assert behind(pss(0, w0=10, w1=8), pss(30, w0=10, w1=8), "parameter_server") is None  # 20 %: within


def test_under_mwms_the_task_the_others_wait_for_spends_least_of_its_time_inside_tensorflow():
    lag = behind(mwms(0, w0=0.9, w1=0.3, w2=0.85), mwms(30, w0=0.9, w1=0.3, w2=0.85), "multi_worker_mirrored")
    assert lag is not None and lag.key == "worker:1" and "they spend 88 % of their time" in lag.why and "it 30 %" in lag.why
    assert behind(mwms(0, w0=0.9, w1=0.8), mwms(30, w0=0.9, w1=0.8), "multi_worker_mirrored") is None
    # rates alike under MWMS say nothing; other strategies: nothing to compare
    assert behind(pss(0, w0=10, w1=2), pss(30, w0=10, w1=2), "multi_worker_mirrored") is None
    assert behind(mwms(0, w0=0.9, w1=0.1), mwms(30, w0=0.9, w1=0.1), "mirrored") is None


def test_a_task_that_made_no_progress_in_the_window_is_not_a_straggler_but_a_hang_s_business():
    old, new = mwms(0, w0=0.9, w1=0.1), mwms(30, w0=0.9, w1=0.1)
    new = Sample(30, {"worker:0": 300, "worker:1": 0}, new.inside, {})
    old = Sample(0, {"worker:0": 0, "worker:1": 0}, old.inside, {})
    assert behind(old, new, "multi_worker_mirrored") is None  # (one task left: nothing to compare)


def test_named_only_once_it_holds_for_hold_samples_then_its_catching_up_once():
    watch = Stragglers("parameter_server")
    said, at = [], 0.0
    slow = True
    counts = {"worker:0": 0, "worker:1": 0, "worker:2": 0}
    for step in range(40):
        at = step * EVERY
        if step == 20:
            slow = False
        counts = {"worker:0": counts["worker:0"] + 100, "worker:1": counts["worker:1"] + 100,
                  "worker:2": counts["worker:2"] + (30 if slow else 100)}
        out = watch.sample(Sample(at, {}, {}, dict(counts)))
        if out is not None:
            said.append((at, out if isinstance(out, str) else out.key))
    named_at = [a for a, k in said if k == "worker:2"]
    assert len(said) == 2 and said[0][1] == "worker:2" and said[1][1] == "worker:2", said
    # named once HOLD windows agree; caught up once HOLD windows are clean
    assert named_at == [HOLD * EVERY, (20 + HOLD - 1) * EVERY], said
    assert watch.named is None


def test_samples_closer_than_every_are_passed_over():
    watch = Stragglers("parameter_server")
    assert watch.sample(pss(0, w0=10, w1=1)) is None
    assert watch.sample(pss(1, w0=10, w1=1)) is None and watch.last.at == 0


def test_a_long_pause_once_is_not_a_straggler():
    # worker:0 pauses 25 s once (a callback's upload): its windows lag at most three in a row
    watch, inside, said = Stragglers("multi_worker_mirrored"), {"worker:0": 0.0, "worker:1": 0.0}, []
    for step in range(1, 30):
        at = step * EVERY
        paused = 100 <= at < 125 or (at == 130)  # (the window ending at 130 holds 5 s of it)
        inside = {"worker:0": inside["worker:0"] + (1.0 if paused else 9.0),
                  "worker:1": inside["worker:1"] + 9.0}
        out = watch.sample(Sample(at, {"worker:0": step * 10, "worker:1": step * 10}, dict(inside), {}))
        said += [out] if out is not None else []
    assert said == []


def test_the_beat_carries_time_inside_and_the_coordinator_s_counts_by_worker():
    group = AttemptGroup(clock=lambda: 5.0)
    assert group.control("chief:0", "tfcluster-beat n=120 in=3.25 w=0:60,1:40,x:9,2:") == "beat"
    assert group.inside["chief:0"] == 3.25 and group.closures["chief:0"] == {0: 60, 1: 40}
    group.control("chief:0", "tfcluster-beat n=130 in=nan-ish w=" + ",".join(f"{i}:1" for i in range(9000)))
    assert group.inside["chief:0"] == 3.25 and len(group.closures["chief:0"]) == 4096  # bounded
    group.new_process("chief:0")
    assert "chief:0" not in group.inside and "chief:0" not in group.closures


def _named(watch: Stragglers, every: float, windows: int) -> list:
    """What ``watch`` says over ``windows`` samples ``every`` seconds apart, worker:1 at a third of the others' rate."""
    said = []
    for step in range(windows):
        out = watch.sample(pss(step * every, w0=10, w1=10, w2=3))
        said += [(step * every, out.key)] if isinstance(out, Lag) else []
    return said


def test_straggler_after_sets_the_windows_so_that_a_verdict_takes_that_long_and_0_names_none():
    # watchdog.straggler_after 12: six 2-second windows; a sample 1 s after the last is passed over
    watch = Stragglers("parameter_server", 12.0)
    assert watch.sample(pss(0, w0=10, w2=3)) is None and watch.sample(pss(1.5, w0=10, w2=3)) is None
    assert watch.last.at == 0
    assert _named(Stragglers("parameter_server", 12.0), 2.0, 10) == [(12.0, "worker:2")]
    assert _named(Stragglers("parameter_server", 12.0), 1.0, 13) == [(12.0, "worker:2")]  # (every other sample taken)
    assert _named(Stragglers("parameter_server"), 2.0, 40) == [(60.0, "worker:2")]  # the default: a minute
    assert _named(Stragglers("parameter_server", 0.0), 2.0, 40) == []
    mwms_named = []
    for after in (12.0, 0.0):
        watch = Stragglers("multi_worker_mirrored", after)
        mwms_named.append([(step * 2.0, out.key) for step in range(40)
                           for out in [watch.sample(mwms(step * 2.0, w0=0.9, w1=0.3, w2=0.85))] if isinstance(out, Lag)])
    assert mwms_named == [[(12.0, "worker:1")], []]
