"""``tfcluster down`` acts on what a run record names only once the thing is proven the run's own
(a record on a shared disk is input from someone else): the pure proofs of the docker backend
(a container's labels) and the slurm backend (the job's user, name and comment as Slurm reports
them), and the docker backend's down against a fake engine client. The real Slurm cluster and the
real ssh hosts are in tests/integration/slurm and tests/integration/ssh; the real dockerd in
tests/integration/docker."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.backends import RecordedRun
from launcher.backends.docker import backend as docker_backend
from launcher.backends.docker import containers
from launcher.backends.slurm import alloc
from launcher.backends.slurm.cli import JobOwner
from launcher.ui.console import Console

RUN = "20260101-000000-ab12"


@pytest.mark.parametrize("found, said", [
    (None, "it has no tfcluster.run_id label (tfcluster did not create it)"),
    ({"com.example": "x"}, "it has no tfcluster.run_id label (tfcluster did not create it)"),
    ({"tfcluster.run_id": "20250101-000000-ffff", "tfcluster.name": "t"},
     f"its label tfcluster.run_id is '20250101-000000-ffff', not {RUN}"),
    ({"tfcluster.run_id": RUN, "tfcluster.name": "other"}, "its label tfcluster.name is 'other', not t"),
    ({"tfcluster.run_id": RUN}, "its label tfcluster.name is 'None', not t"),
    ({"tfcluster.run_id": "\x1b]52;c;eA==\x07", "tfcluster.name": "t"}, "not " + RUN),
])
def test_a_container_is_the_runs_only_with_both_labels_tfcluster_set(found, said):
    why = containers.not_own(found, RUN, "t")
    assert why is not None and said in why
    assert "\x1b" not in why and "\x07" not in why
    assert containers.not_own(containers.labels(RUN, "t", "worker:0"), RUN, "t") is None


@pytest.mark.parametrize("job, said", [
    (None, "Slurm reports no such job"),
    (JobOwner("mallory", "tfcluster-t", alloc.job_comment("t", RUN)), "its user is 'mallory', not alice"),
    (JobOwner("alice", "train", ""), "its name is 'train', not tfcluster-t"),
    (JobOwner("alice", "tfcluster-t", ""), f"its comment is '', not tfcluster:t/{RUN}"),
    (JobOwner("alice", "tfcluster-t", alloc.job_comment("t", "20250101-000000-ffff")),
     f"not tfcluster:t/{RUN} (another run's job"),
])
def test_a_job_is_the_runs_only_when_slurm_says_user_name_and_comment_are(job, said):
    why = alloc.not_own(job, "alice", "t", RUN)
    assert why is not None and said in why, why
    assert alloc.not_own(JobOwner("alice", "tfcluster-t", alloc.job_comment("t", RUN)), "alice", "t", RUN) is None


def test_the_job_is_submitted_with_the_runs_comment_and_a_spec_cannot_set_another():
    from launcher.backends.slurm.options import own_option

    req = alloc.Request(job_name="tfcluster-t", nodes=1, tasks_per_node=1, comment=alloc.job_comment("t", RUN),
                        extra=("--exclusive",))
    argv = req.sbatch_argv()
    assert f"--comment=tfcluster:t/{RUN}" in argv and argv.index("--exclusive") > argv.index(f"--comment=tfcluster:t/{RUN}")
    assert own_option("--comment=mine")[0] == "--comment" and own_option("--comm")[0] == "--comment"


class FakeAPI:
    """The docker SDK's low-level API as DockerHosts.down uses it: containers by id (with their
    labels), label-filtered listings, removal."""

    def __init__(self, containers_by_id: dict, networks: list):
        self.by_id, self.nets, self.removed = containers_by_id, networks, []

    def inspect_container(self, cid):
        if cid not in self.by_id:
            raise docker_backend.docker.errors.NotFound("gone")
        return {"Id": cid, "Config": {"Labels": self.by_id[cid]}}

    def containers(self, all, filters):
        key, _, value = filters["label"].partition("=")
        return [{"Id": c, "Names": [f"/{c}"], "Labels": labels} for c, labels in self.by_id.items()
                if labels.get(key) == value]

    def networks(self, filters):
        key, _, value = filters["label"].partition("=")
        return [n for n in self.nets if n["Labels"].get(key) == value]

    def stop(self, cid, timeout):
        pass

    def remove_container(self, cid, force):
        self.removed.append(cid)
        del self.by_id[cid]

    def remove_network(self, nid):
        self.removed.append(nid)


def test_docker_down_removes_the_runs_containers_and_names_a_foreign_one_the_record_names(tmp_path, capsys):
    pytest.importorskip("docker")
    own = containers.labels(RUN, "t", "worker:0")
    api = FakeAPI({"own0": own, "foreign": {"com.example.app": "db"},
                   "forged": {"tfcluster.run_id": RUN, "tfcluster.name": "someone-elses"}},
                  [{"Id": "net0", "Name": "tfcluster-t", "Labels": containers.labels(RUN, "t")}])
    shared = docker_backend.DockerRun.__new__(docker_backend.DockerRun)
    shared.spec = SimpleNamespace(name="t", watchdog=SimpleNamespace(stop_grace=0))
    shared.url, shared._client = "unix:///var/run/docker.sock", SimpleNamespace(api=api)
    hosts = docker_backend.DockerHosts(shared)
    run = RecordedRun(tmp_path / RUN, {"tasks": {"worker:0": {"container_id": "own0", "container": "t-0"},
                                                 "worker:1": {"container_id": "foreign", "container": "db"}}})
    assert hosts.down(run, Console(color=False)) is True
    assert api.removed == ["own0", "net0"]
    assert "foreign" in api.by_id and "forged" in api.by_id
    assert run.refused == [f"worker:1: not removing container db, which run {RUN}'s record names: it has no "
                           "tfcluster.run_id label (tfcluster did not create it)"]
