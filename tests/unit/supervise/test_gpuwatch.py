"""Each task's GPU memory and utilisation (launcher/supervise/gpuwatch.py): nvidia-smi's csv as NVIDIA
documents it, matched to the tasks' processes; the view, the live panel, status and the final
report show the figures and the peak."""

from __future__ import annotations

import os

import pytest

from launcher.supervise import gpuwatch
from launcher.ui.panel import gpu_text, render
from launcher.record.events import Event, RunRecordDamaged
from launcher.record.view import RunModel
from launcher.ui.report import gpu_peak_lines

APPS = "4242, 1234\n4343, 50\n4242, 100\n[Not Supported], 12\n"
GPUS = "0, 37, 1384, 40960\n1, [N/A], 0, 40960\n"


def test_parse_nvidia_smi_csv():
    assert gpuwatch.parse_apps(APPS) == {4242: 1334, 4343: 50}  # a pid on two GPUs: the sum
    assert gpuwatch.parse_gpus(GPUS) == {0: 37, 1: None}
    assert gpuwatch.parse_apps("") == {} and gpuwatch.parse_gpus("garbage\n") == {}


def test_usage_matches_processes_to_tasks():
    got = gpuwatch.usage({"worker:0": {4242, 7}, "worker:1": {4343}, "ps:0": {4343}},
                         {"worker:0": (0,), "worker:1": (0, 1)}, {4242: 1334, 4343: 50}, {0: 37, 1: None})
    assert got == {"worker:0": (1334, 37), "worker:1": (50, 37)}  # ps:0 has no GPU: not listed


def test_group_members_finds_this_process_group():
    members = gpuwatch.group_members({"me": os.getpgid(0)})
    assert os.getpid() in members["me"]


def test_watch_reports_changes_only_and_gives_up_after_three_misses():
    answers = [({os.getpid(): 500}, {0: 10}), ({os.getpid(): 500}, {0: 10}), ({os.getpid(): 700}, {0: 90})]
    watch = gpuwatch.GpuWatch(lambda: {"worker:0": os.getpgid(0)}, {"worker:0": (0,)}, lambda f: None,
                              sampler=lambda timeout: answers.pop(0))
    assert watch.sample_once() == {"worker:0": (500, 10)}
    assert watch.sample_once() is None  # unchanged
    assert watch.sample_once() == {"worker:0": (700, 90)}
    said = []
    dead = gpuwatch.GpuWatch(lambda: {}, {"worker:0": (0,)}, lambda f: None, lambda *a: said.append(a), every=0.01,
                             timeout=2.0, sampler=lambda timeout: None).start()
    dead._thread.join(5)
    assert not dead._thread.is_alive() and said == [(3, 2.0)]
    from launcher.record import events as ev
    from launcher.ui.eventlines import said as lines

    assert [s.lines for s in lines(ev.GpuWatchEnded(misses=3, timeout=2.0), RunModel())] == [
        ("nvidia-smi did not answer 3 times in a row (timeout 2 s); no more GPU figures for this run",)]


def test_view_panel_status_and_report_show_memory_utilisation_and_peak():
    view = RunModel()
    view.event({"event": Event.RUN_START, "name": "g", "strategy": "multi_worker_mirrored", "backend": "local",
                "tasks": ["worker:0", "worker:1"]})
    view.event({"event": Event.GPU_USAGE, "tasks": {"worker:0": [2048, 90], "worker:1": [512, None]}})
    with pytest.raises(RunRecordDamaged, match=r"gpu_usage.*tasks: text 'x' where a list goes"):
        view.event({"event": Event.GPU_USAGE, "tasks": {"worker:0": [1024, 40], "bogus": "x", "worker:1": "y"}})
    view.event({"event": Event.GPU_USAGE, "tasks": {"worker:0": [1024, 40], "bogus": [1, 2]}})
    t0, t1 = view.tasks["worker:0"], view.tasks["worker:1"]
    assert (t0.gpu_mib, t0.gpu_util, t0.gpu_peak_mib) == (1024, 40, 2048)
    assert (t1.gpu_mib, t1.gpu_peak_mib) == (512, 512)  # a malformed event is damage, read by no one
    assert gpu_text(t0) == "1024M 40%" and gpu_text(t1) == "512M"
    assert gpu_peak_lines(view) == ["  gpu memory peak: worker:0 2048 MiB, worker:1 512 MiB"]
    assert RunModel.from_json(view.to_json()).tasks["worker:0"].gpu_peak_mib == 2048
    from rich.console import Console

    console = Console(width=160, record=True, file=open(os.devnull, "w"))
    console.print(render(view.snapshot(), 0.0))
    text = console.export_text()
    assert "gpu" in text.splitlines()[2] and "1024M 40%" in text
    empty = RunModel()
    empty.event({"event": Event.RUN_START, "tasks": ["worker:0"]})
    assert gpu_peak_lines(empty) == []


def test_the_wrappers_figures_line_and_watched_ids():
    from launcher.remote import gpuplace

    host = [(0, "A100", "GPU-aaaa"), (1, "A100", "GPU-bbbb"), (2, "A100", "GPU-cccc")]
    assert gpuplace.watched_ids(None, host) == [0, 1, 2]  # unset: every GPU of the host
    assert gpuplace.watched_ids("2,0", host) == [2, 0] and gpuplace.watched_ids("GPU-bbbb", host) == [1]
    assert gpuplace.watched_ids("-1", host) == [] and gpuplace.watched_ids("1,-1,2", host) == [1]  # CUDA stops at -1
    assert gpuplace.watched_ids("0", []) == [] and gpuplace.watched_ids("7", host) == []
    for mib, util in ((1234, 37), (0, None)):
        line = gpuplace.figures_line(mib, util)
        assert line.endswith("\n") and gpuplace.parse_figures_line(line.rstrip("\n")) == (mib, util)
    for bad in ("taskwrap: GPU figures [1, 2, 3]", "taskwrap: GPU figures [x, 1]", "taskwrap: GPU figures 1, 2",
                "taskwrap: GPU figures [1, " + "9" * 90 + "]", "worker: GPU figures [1, 2]"):
        assert gpuplace.parse_figures_line(bad) is None, bad
    for ids in ([0], [1, 3], []):
        assert gpuplace.parse_given_line(gpuplace.given_line(ids).rstrip("\n")) == (ids, "", "")
    assert gpuplace.parse_given_line("taskwrap: GPUs given 0,x") is None and gpuplace.parse_given_line("GPUs given 0") is None
    # Where the task's CUDA_VISIBLE_DEVICES names UUIDs (its MIG device, the host's UUID limit) the line
    # carries it, and the collective the wrapper set (collective auto decided on the host).
    mig = "MIG-6b9c1f2a-0c1d-5e2f-8a3b-4c5d6e7f8091"
    line = gpuplace.given_line([0], mig, "").rstrip("\n")
    assert line == "taskwrap: GPUs given 0 visible=" + mig and gpuplace.parse_given_line(line) == ([0], mig, "")
    line = gpuplace.given_line([2, 3], "GPU-aaaa,GPU-bbbb", "nccl").rstrip("\n")
    assert gpuplace.parse_given_line(line) == ([2, 3], "GPU-aaaa,GPU-bbbb", "nccl")
    assert gpuplace.given_line([1], "1", "nccl") == "taskwrap: GPUs given 1 collective=nccl\n"  # indices: not repeated
    assert gpuplace.given_line([], "-1") == "taskwrap: GPUs given none\n"
    # Another machine's bytes: what is not a UUID or a word is not read (never shown raw).
    assert gpuplace.parse_given_line("taskwrap: GPUs given 0 visible=MIG-\x1b[31m collective=nc;cl") == ([0], "", "")
