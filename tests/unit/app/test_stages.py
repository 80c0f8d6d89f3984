"""launcher/app/stages.py and up.py: ``up`` as a list of stages, each a function of a frozen
value; what the CLI runs chooses the stages (a dry run stops after the probe and allocates
nothing); the spec file is read once however many stages read the spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import launcher.loader.load as load
from launcher.app import stages
from launcher.cli.main import main
from tests.support.specs import script_spec


@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """Every read of a file through the loader's one reader of spec files."""
    seen: list[Path] = []
    real = load.read_regular
    monkeypatch.setattr(load, "read_regular", lambda path, *a, **k: seen.append(Path(path)) or real(path, *a, **k))
    return seen


def test_a_run_reads_its_spec_once_and_runs_every_stage(tmp_path, reads):
    path = script_spec(tmp_path, "print('stage-ok')", tasks="{worker: 1}")
    assert main(["up", str(path), "--quiet"]) == 0
    assert reads == [path]
    run = (tmp_path / "runs" / "t" / "latest").resolve()
    assert (run / "plan.json").is_file() and (run / "events.jsonl").is_file()  # allocate, record, supervise


def test_a_dry_run_stops_after_the_probe(tmp_path, reads, capsys):
    path = script_spec(tmp_path, "print('never')", tasks="{worker: 1}")
    assert main(["up", str(path), "--dry-run"]) == 0
    assert reads == [path]
    assert "dry run: preflight passed; would start 1 tasks on backend local" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # no record: nothing allocated, nothing started


def test_the_stages_hand_on_frozen_values(tmp_path):
    path = script_spec(tmp_path, "pass", tasks="{worker: 1}")
    read = stages.load(str(path))
    found = stages.discover(read)
    planned = stages.plan(found)
    assert found.read is read.loaded and found.static_hosts is None  # (no discovery: the file's spec)
    for value, field in ((read, "shown"), (found, "loaded"), (planned, "plan")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)


def test_discovery_keeps_the_files_hosts_apart_without_reading_the_file_again(tmp_path, reads):
    """The hosts the file lists (which discovery never drops: the supervisor's static hosts) come
    from the one read, not from reading the file again."""
    from launcher.app.up import prepare
    from launcher.notices import PlainNotices

    listing = tmp_path / "hosts.txt"
    listing.write_text("h2 10.0.0.2\n")
    path = tmp_path / "cluster.yaml"
    path.write_text("name: t\nstrategy: multi_worker_mirrored\nbackend: ssh\nentrypoint: python -m worker\n"
                    "hosts: [{name: h1, address: 10.0.0.1}]\ntasks: {worker: 2}\n"
                    f"discovery: {{command: cat {listing}}}\n")
    planned = prepare(str(path), PlainNotices())
    assert planned.discovered.static_hosts == ["h1"]
    assert [h.name for h in planned.loaded.spec.hosts] == ["h1", "h2"]
    assert sorted({t.host for t in planned.plan.tasks}) == ["h1", "h2"]
    assert reads == [path]
