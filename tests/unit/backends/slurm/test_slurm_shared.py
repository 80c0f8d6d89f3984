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
