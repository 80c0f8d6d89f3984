"""One ``nvidia-smi -L`` where one process asks three times in a row (remote/gpuquery.py's
``fresh_for``): the ssh host agent asks in the preflight, then becomes the task wrapper, whose GPU
request (taskenv.gpu_request) and GPU watch asked again each time. A stand-in nvidia-smi counts
its calls; the launcher's own queries (fresh_for 0) always ask."""

from __future__ import annotations

import os

import pytest

from launcher.remote import gpuplace, gpuquery, taskenv
from launcher.remote.sibling import sibling

# On a host the agent imports gpuquery from the run dir as a module of its own name, as the
# wrapper's sibling() does: one module, one memory.
HOSTS = sibling("gpuquery")

LISTING = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6f1d2c3b-0000-1111-2222-333344445555)"


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """A stand-in nvidia-smi listing what ``listing`` holds; ``calls`` counts its runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls, listing = tmp_path / "calls", tmp_path / "listing"
    listing.write_text(LISTING + "\n")
    fake = bindir / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\necho run >> "{calls}"\ncat "{listing}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    # (set, then deleted: monkeypatch then removes the one the wrapper's request sets; a delenv of
    # a variable that is not there records nothing to undo, and it leaked into later tests)
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setattr(gpuquery, "_LAST", [])
    monkeypatch.setattr(HOSTS, "_LAST", [])
    return lambda: len(calls.read_text().split()) if calls.exists() else 0, listing


def test_the_launchers_queries_always_ask(smi):
    count, _ = smi
    assert gpuquery.host_gpus_checked() == gpuquery.host_gpus_checked()
    assert count() == 2


def test_the_agent_become_wrapper_asks_once_for_its_preflight_its_request_and_its_watch(smi, monkeypatch):
    count, listing = smi
    gpuquery = HOSTS
    found, failure = gpuquery.host_gpus_checked()  # the agent's preflight
    assert (len(found), failure, count()) == (1, None, 1)
    var = "TFCLUSTER_TEST_GPUS"
    monkeypatch.setenv(var, gpuplace.format_request(1, tasks=1))
    said = []
    assert taskenv.gpu_request(var, "", "", said.append) is None  # the wrapper's --gpus
    assert os.environ["CUDA_VISIBLE_DEVICES"] and said
    assert gpuquery.host_gpus(fresh_for=gpuquery.FRESH) == found  # the watch's first look
    assert count() == 1
    # An answer older than FRESH is asked again, and a changed host is seen.
    listing.write_text(LISTING + "\n" + LISTING.replace("GPU 0", "GPU 1").replace("5555)", "6666)") + "\n")
    gpuquery._LAST[0] = (gpuquery._LAST[0][0] - gpuquery.FRESH - 1, gpuquery._LAST[0][1])
    assert len(gpuquery.host_gpus(fresh_for=gpuquery.FRESH)) == 2
    assert count() == 2
