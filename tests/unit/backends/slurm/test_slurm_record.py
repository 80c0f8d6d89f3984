"""The slurm backend records its allocation through the run record (``RunRecord.allocated``):
slurm.json keeps the format it always had (the job id at submission, then the nodes and their
addresses), launcher.json carries the same as ``allocation``, and ``tfcluster down`` finds the
job in either (a record of an older tfcluster has only slurm.json). No Slurm is needed: the
real commands run in tests/integration/slurm."""

from __future__ import annotations

import json
import os
import pwd

from launcher.backends import RecordedRun
from launcher.backends.slurm import backend as slurm_backend
from launcher.backends.slurm.backend import SlurmHosts
from launcher.backends.slurm.job import SlurmJob
from launcher.ui.console import Console
from launcher.app.up import plan_for
from launcher.record.writer import RunRecord
from launcher.loader.load import LoadedSpec, parse_spec
from tests.support.specs import SLURM_BASE

SPEC = SLURM_BASE


def _backend(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(SPEC)
    loaded = LoadedSpec(parse_spec(SPEC, str(path)), path)
    record = RunRecord(tmp_path / "runs", plan_for(loaded.spec)).create()
    return SlurmJob(loaded, record, Console(color=False)), record


def _old_format(**extra) -> str:
    """slurm.json as the slurm backend wrote it itself before the record API did."""
    data = {"job_id": "42", "slurm_conf": os.environ.get("SLURM_CONF"), **extra}
    return json.dumps(data, indent=2) + "\n"


def test_the_allocation_is_in_slurm_json_as_before_and_in_launcher_json(tmp_path):
    backend, record = _backend(tmp_path)
    backend.job_id = "42"
    backend.record_allocation()
    assert (record.dir / "slurm.json").read_text() == _old_format()
    nodes, addresses = ["n1", "n2"], {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    backend.record_allocation(nodes=nodes, addresses=addresses)
    assert (record.dir / "slurm.json").read_text() == _old_format(nodes=nodes, addresses=addresses)
    launcher = json.loads((record.dir / "launcher.json").read_text())
    assert launcher["allocation"] == json.loads(_old_format(nodes=nodes, addresses=addresses))
    record.close()


def test_down_cancels_the_recorded_job_from_launcher_json_or_an_old_slurm_json(tmp_path, monkeypatch):
    backend, record = _backend(tmp_path)
    backend.job_id = "42"
    backend.record_allocation()
    record.close()
    cancelled = []
    monkeypatch.setattr(slurm_backend.alloc, "cancel", lambda job: cancelled.append(job) or True)
    monkeypatch.setattr(slurm_backend.cli, "job_state", lambda job: slurm_backend.cli.JobState("RUNNING", "", "n1"))
    owner = slurm_backend.cli.JobOwner(pwd.getpwuid(os.getuid()).pw_name, "tfcluster-demo",
                                       slurm_backend.alloc.job_comment("demo", record.run_id))
    monkeypatch.setattr(slurm_backend.cli, "job_owner", lambda job: owner)
    info = json.loads((record.dir / "launcher.json").read_text())
    assert SlurmHosts(backend).down(RecordedRun(record.dir, info), Console(color=False)) is True
    old = {k: v for k, v in info.items() if k != "allocation"}  # written before launcher.json had it
    assert SlurmHosts(backend).down(RecordedRun(record.dir, old), Console(color=False)) is True
    assert cancelled == ["42", "42"]
