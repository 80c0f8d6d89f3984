"""launcher/backends/slurm/shared.py: the per-node answers of the file system check, read."""

from pathlib import Path

import pytest

from launcher.backends.slurm.shared import argv, problems

W, S = Path("/work"), Path("/work/runs/x/state")


@pytest.mark.parametrize("stdout, expected", [
    ("n1 ok\nn2 ok\n", []),
    ("n2 ok\nn1 ok\n", []),  # steps answer in any order
    ("n1 ok\nn2 state\n", ["node n2 does not see the state dir /work/runs/x/state"]),
    ("n1 workdir\nn2 ok\n", ["node n1 has no workdir /work"]),
    ("n1 ok\n", ["node n2 did not answer the file system check"]),
    ("slurmstepd: error: couldn't chdir\nn1 ok\nn2 ok\n", []),  # noise around the answers
    ("", ["node n1 did not answer the file system check", "node n2 did not answer the file system check"]),
])
def test_problems_names_each_node_that_is_not_fine(stdout, expected):
    assert problems(stdout, ["n1", "n2"], W, S) == expected


def test_one_step_task_per_node_inside_the_job_without_touching_its_cpus():
    a = argv("7", ["n1", "n3"], W, S / ".m", "tok")
    assert a[:9] == ["srun", "--jobid=7", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n3",
                     "--overlap", "--input=none", "--chdir=/"]
    assert a[-4:] == ["sh", "/work", "/work/runs/x/state/.m", "tok"]


def test_a_symlink_planted_at_the_marker_is_not_written_through(tmp_path, monkeypatch):
    """The state dir is on a shared disk: a link someone planted where the marker goes (its name
    guessed, here made known) must not redirect the write to the link's target."""
    from launcher.backends.slurm import shared
    from launcher.errors import LaunchError

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr(shared.secrets, "token_hex", lambda n: "0123456789abcdef")
    (state / ".tfcluster-shared-0123456789abcdef").symlink_to(victim)
    ran = []
    monkeypatch.setattr(shared.cli, "run", lambda *a, **k: ran.append(a))
    with pytest.raises(LaunchError) as exc:
        shared.check("42", ["n1"], tmp_path, state)
    assert "something is already at" in str(exc.value) and "nothing was written" in str(exc.value)
    assert victim.read_text() == "precious\n" and ran == []
    # A dangling link is not followed either (its target is not created).
    (state / ".tfcluster-shared-0123456789abcdef").unlink()
    (state / ".tfcluster-shared-0123456789abcdef").symlink_to(tmp_path / "created")
    with pytest.raises(LaunchError):
        shared.check("42", ["n1"], tmp_path, state)
    assert not (tmp_path / "created").exists()
