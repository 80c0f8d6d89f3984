"""The Slurm lab itself: a node Slurm takes out of service is said in Slurm's words and put back
(between tests, by the ``lab`` fixture), so that one test's drained node is not every later test's
error."""

from __future__ import annotations

from tests.support.waits import wait_for


def test_a_drained_node_is_said_with_slurms_reason_and_put_back(slurm):
    slurm.wait_idle(30)
    assert slurm.out_of_service() == {}
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", "reason=Kill task failed (lab check)")
    wait_for(lambda: "n2" in slurm.out_of_service(), 20, what="n2 drained")
    left = slurm.out_of_service()
    assert list(left) == ["n2"] and "DRAIN" in left["n2"] and "Kill task failed (lab check)" in left["n2"], left
    slurm.resume(list(left))
    slurm.wait_idle(30)
    assert slurm.out_of_service() == {}
