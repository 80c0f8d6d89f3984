"""Which tasks the hang watchdog may name for silence (launcher/supervise/policy.py)."""

from launcher.supervise.policy import hang_watched, silent_by_design


def test_pss_servers_are_silent_by_design_but_not_the_chief():
    assert silent_by_design("parameter_server", "ps:0")
    assert silent_by_design("parameter_server", "worker:1")
    assert not silent_by_design("parameter_server", "chief:0")


def test_mwms_workers_must_print():
    assert not silent_by_design("multi_worker_mirrored", "worker:0")
    assert not silent_by_design("multi_worker_mirrored", "chief:0")


def test_evaluator_is_never_watched_for_hangs():
    assert not hang_watched("evaluator:0")
    assert hang_watched("ps:0") and hang_watched("worker:0") and hang_watched("chief:0")
