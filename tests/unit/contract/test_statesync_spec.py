"""The ``state:`` block (one-line errors) and the launcher's copy of the worker's state layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.contract import statedir as statelayout
from launcher.loader.load import parse_spec
from tests.support.errors import one_error
from tests.support.specs import BASE

ROOT = Path(__file__).resolve().parents[3]


def test_state_defaults():
    state = parse_spec(BASE).state
    assert (state.dir, state.sync, state.fetch) == (None, "auto", "model")


def test_state_values():
    state = parse_spec(BASE + "state: {dir: /data/ckpt, sync: copy, fetch: checkpoints}\n").state
    assert (state.dir, state.sync, state.fetch, state.is_url) == ("/data/ckpt", "copy", "checkpoints", False)
    assert parse_spec(BASE + "state: {dir: 'gs://bucket/run'}\n").state.is_url


@pytest.mark.parametrize("state, expected", [
    ("{sync: copi}", "c.yaml:6: state.sync: 'copi' is not valid; use one of 'auto', 'shared' or 'copy'"),
    ("{fetch: all}", "c.yaml:6: state.fetch: 'all' is not valid; use one of 'model', 'checkpoints' or 'none'"),
    ("{dir: 's3://b/x'}", "c.yaml:6: state.dir: 's3://b/x': the only URL scheme supported is gs:// (GCS); "
                          "give a path or a gs:// URL"),
    ("{dir: 'gs://b/x', sync: copy}", "c.yaml:6: state: sync: copy with dir gs://b/x: a gs:// dir is shared "
                                      "storage; set sync: shared or auto"),
    ("{dir: ' '}", "c.yaml:6: state.dir: empty path; give a directory on the hosts or remove the key"),
    ("{syncs: copy}", "c.yaml:6: state.syncs: unknown key 'syncs' (did you mean 'sync'?); valid keys: dir, sync, "
                      "fetch"),
])
def test_state_errors(state, expected):
    assert one_error(BASE + f"state: {state}\n") == expected


def test_worker_layout_uses_the_launchers_names():
    """worker/layout.py (imported without TF) builds every path from launcher/contract/statedir.py."""
    from worker.layout import Layout

    lay = Layout(Path("/s"))
    assert lay.backup == Path("/s") / statelayout.BACKUP
    assert lay.checkpoints == Path("/s") / statelayout.CHECKPOINTS
    assert lay.custom_checkpoints == Path("/s") / statelayout.CUSTOM_CHECKPOINTS
    assert lay.final == Path("/s") / statelayout.FINAL_MODEL
    assert lay.checkpoint_dir("custom") == lay.custom_checkpoints and lay.checkpoint_dir("fit") == lay.checkpoints
    assert statelayout.RESUME_AREAS == (statelayout.BACKUP, statelayout.CUSTOM_CHECKPOINTS)
