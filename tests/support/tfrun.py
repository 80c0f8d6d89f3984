"""Helpers for tests that run real TensorFlow clusters through ``tfcluster up``."""

from __future__ import annotations

import glob
import re

import os
import signal
import subprocess
from pathlib import Path
from typing import Mapping, Optional

import pytest

from launcher.compare.tensorboard import no_tensorflow
from launcher.contract.progress import parse
from tests.support.cli import ROOT, start_tfcluster, tfcluster
from tests.support.specs import local_spec
from tests.support.processes import pids_with_env, task_pids
from tests.support.waits import read_rest, wait_for, wait_line
import launcher.record.events as ev
from tests.support.records import read_records

RUN_TIMEOUT = 300



def write_spec(tmp_path: Path, tfds_dir: Path, entrypoint: str, tasks: str = "{worker: 2}", extra: str = "",
               strategy: str = "multi_worker_mirrored", watchdog: str = "{startup_timeout: 120, stop_grace: 3}") -> Path:
    """A spec (run name ``demo``) for a TensorFlow run of ``entrypoint`` that imports this
    checkout's worker and reads its datasets from ``tfds_dir``."""
    return local_spec(tmp_path, entrypoint, name="demo", tasks=tasks, strategy=strategy, extra=extra,
                      env={"PYTHONPATH": str(ROOT), "TFDS_DATA_DIR": str(tfds_dir), "TF_CPP_MIN_LOG_LEVEL": '"2"'},
                      watchdog=watchdog)


def with_epoch_eval(spec: Path) -> Path:
    """``spec`` (write_spec's) with $TFCLUSTER_EPOCH_EVAL=1 in its env, as ``tfcluster compare``
    sets it: the worker evaluates the test split after every epoch and its epoch lines carry
    test_loss and test_accuracy (check_epoch_eval)."""
    text = spec.read_text()
    assert '  TF_CPP_MIN_LOG_LEVEL: "2"\n' in text, text
    spec.write_text(text.replace('  TF_CPP_MIN_LOG_LEVEL: "2"\n', '  TF_CPP_MIN_LOG_LEVEL: "2"\n  TFCLUSTER_EPOCH_EVAL: "1"\n'))
    return spec


def check_epoch_eval(epochs: list[dict], result: dict) -> None:
    """--epoch-eval's figures on a task's epoch lines (progress(..., "epoch")): every epoch has a
    test loss and accuracy, and the last epoch's are the final evaluation's (``result``, the
    result line: the same weights), which checks them independently."""
    assert epochs, result
    for e in epochs:
        assert 0.0 <= float(e["test_accuracy"]) <= 1.0 and float(e["test_loss"]) > 0, e
        assert int(e["global_step"]) > 0, e
    assert float(epochs[-1]["test_accuracy"]) == pytest.approx(float(result["accuracy"]), abs=1e-4), (epochs, result)
    assert float(epochs[-1]["test_loss"]) == pytest.approx(float(result["loss"]), abs=1e-3), (epochs, result)


def cold(max_restarts: int, **more) -> dict:
    """A ``restart:`` block whose every restart starts cold (warm_standby: false), for a test of a
    restart that is not about warm standbys (test_standby.py, test_pss.py's standby case and each
    backend's test_*_standby.py are) and that leaves standbys unused under the default: one that
    restarts fewer times than max_restarts allows (the attempt that ends the run has a set waiting
    too) or restarts one task alone (every other task's standby waits for nothing). Each unused
    standby costs a whole TensorFlow import of CPU, the suite's scarcest resource on 2 cores. The
    restart then also takes one path, not the one that whether the standbys had finished
    importing when the fault came decided."""
    return {"max_restarts": max_restarts, "warm_standby": False, **more}


def cold_restarts(max_restarts: int) -> str:
    """``cold(max_restarts)`` as the spec's YAML line."""
    return f"restart: {{max_restarts: {max_restarts}, warm_standby: false}}\n"


def up(path: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """``tfcluster up --verbose``: its output holds the tasks' progress records as they sent them
    (``[worker:0] tfcluster-step ...``), which these tests read and act on."""
    return tfcluster("up", path, "--verbose", timeout=timeout)


def start(path: Path, env: Optional[Mapping[str, str]] = None) -> subprocess.Popen:
    """``up`` started, ``--verbose`` (as ``up``)."""
    return start_tfcluster("up", path, "--verbose", env=env)


def run_dir(path: Path) -> Path:
    return (path.parent / "runs" / "demo" / "latest").resolve()


def progress(text: str, kind: str, task: str = "worker:0") -> list[dict]:
    """The fields of ``task``'s ``tfcluster-<kind>`` lines in the launcher's output ``text``,
    read by the launcher's own parser (launcher/contract/progress.py owns the format)."""
    prefix = f"[{task}] "
    lines = (parse(line[len(prefix):]) for line in text.splitlines() if line.startswith(prefix))
    return [dict(p.fields) for p in lines if p is not None and p.kind == kind]


def recorded(run: Path, kind: str, task: str = "worker:0") -> list[dict]:
    """The fields of ``task``'s ``tfcluster-<kind>`` records in the run record ``run``: what it
    said on its control channel, kept in its progress file (``tfcluster logs`` shows what it
    printed, never these), read by the launcher's own parser."""
    path = run / "logs" / (task.replace(":", "-") + ".progress")
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [dict(p.fields) for p in map(parse, lines) if p is not None and p.kind == kind]


def last_step_before(text: str, marker: str, task: str = "worker:0") -> int:
    """The highest global_step of ``task``'s step lines before ``marker`` first appears in
    ``text``: how far the task had got by the time something (its kill) was reported. A kill
    triggered by a step line lands a moment later on a busy machine; bound what it hit by this,
    not by the trigger's step."""
    return max(int(s["global_step"]) for s in progress(text[:text.index(marker)], "step", task))


def last_step_of_first_attempt(text: str, task: str = "worker:0") -> int:
    """The highest global_step of ``task``'s step lines before worker:0's second start line: how
    far the first attempt got. Unlike a bound taken at the line that reported a fault, it counts
    the steps whose lines were still on their way when the launcher printed that line (its reader
    threads and its own lines are not ordered on the console)."""
    starts = [m.start() for m in re.finditer(r"\[worker:0\] tfcluster-start ", text)]
    end = starts[1] if len(starts) > 1 else len(text)
    return max((int(s["global_step"]) for s in progress(text[:end], "step", task)), default=0)


def run_and_act(spec: Path, steps, timeout: float = RUN_TIMEOUT,
                env: Optional[Mapping[str, str]] = None) -> tuple[int, str]:
    """Run ``tfcluster up spec`` (``env`` added to its environment: a lab's); for each
    (pattern, action) wait for a matching output line, then call ``action(proc)``. Returns
    (exit code, all output). Whatever happens, the launcher's process group does not outlive the call."""
    proc = start(spec, env)
    seen: list[str] = []
    try:
        for pattern, action in steps:
            wait_line(proc, pattern, seen, timeout)
            action(proc)
        rest = read_rest(proc, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.returncode, "\n".join(seen) + "\n" + rest


def events(spec: Path) -> list[ev.RecordEvent]:
    return read_records(run_dir(spec))


def assert_no_processes(spec: Path) -> None:
    run_id = run_dir(spec).name
    wait_for(lambda: not pids_with_env("TFCLUSTER_RUN_ID", run_id), 15, what="every process of the run to exit")


def tensorboard_scalars(logdir: Path, pattern: str = "events.out.tfevents.*",
                        only_scalars: bool = True) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in the event files under ``logdir`` matching
    ``pattern`` (a glob, ``**/`` for subdirectories), read record by record (CRCs checked) by
    TensorBoard's own loader in this process, without TensorFlow (launcher/compare/tensorboard.py's
    ``no_tensorflow``, as test_compare.py reads them): a TensorFlow import in a subprocess for
    each read cost about 7 CPU seconds. With ``only_scalars`` every summary in them must be a scalar; else others (a
    model's config as text, a graph) are left out."""
    no_tensorflow()
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    rows = []
    for path in sorted(glob.glob(f"{logdir}/{pattern}", recursive=True)):
        for event in EventFileLoader(path).Load():
            for v in event.summary.value:
                plugin = v.metadata.plugin_data.plugin_name
                value = float(tensor_util.make_ndarray(v.tensor)) if plugin == "scalars" else None
                rows.append((v.tag, event.step, value, plugin))
    assert all(r[3] == "scalars" for r in rows) or not only_scalars, rows
    return [(t, s, v) for t, s, v, plugin in rows if plugin == "scalars"]


def check_train_scalars(spec: Path, out: str, *, epochs: int, steps: int, global_batch: int,
                        learning_rate: float) -> dict[str, list[tuple[int, float]]]:
    """The reference worker's training scalars (its chief's, in state/tensorboard/train) against
    its progress lines in ``out`` (2 MWMS workers trained ``epochs`` of ``steps``, ``global_batch``
    a step, at ``--learning-rate``): the epoch lines' numbers at their global steps, and
    examples/s also against the step lines' own timestamps."""
    train = run_dir(spec).parent / "state" / "tensorboard" / "train"
    # One writer: the chief's (worker 1 prints the same epoch lines but writes nothing).
    assert len(list(train.glob("events.out.tfevents.*"))) == 1, list(train.iterdir())
    rows = tensorboard_scalars(train)
    scalars: dict[str, list[tuple[int, float]]] = {}
    for tag, step, value in sorted(rows):
        scalars.setdefault(tag, []).append((step, value))
    assert set(scalars) == {"loss", "accuracy", "examples_per_sec", "learning_rate"}, scalars
    lines = progress(out, "epoch", "worker:0")
    assert len(lines) == epochs, out[-3000:]
    # Worker 1 reports the same global numbers on its own lines.
    assert [(e["loss"], e["accuracy"]) for e in progress(out, "epoch", "worker:1")] == [
        (e["loss"], e["accuracy"]) for e in lines]
    at = [steps * (i + 1) for i in range(epochs)]
    for tag in scalars:
        assert [s for s, _ in scalars[tag]] == at, (tag, scalars[tag])
    for (_, loss), (_, acc), e in zip(scalars["loss"], scalars["accuracy"], lines):
        assert int(e["global_step"]) in at
        assert loss == pytest.approx(float(e["loss"]), abs=6e-5) and acc == pytest.approx(float(e["accuracy"]), abs=6e-5)
        assert 0.0 <= acc <= 1.0 and 0.0 < loss < 5.0
    for (_, rate), e in zip(scalars["examples_per_sec"], lines):
        assert rate == pytest.approx(float(e["examples_per_sec"]), abs=0.06), (rate, e)
    assert [v for _, v in scalars["learning_rate"]] == pytest.approx([learning_rate] * epochs)  # the one given
    # examples/s per epoch, independently: global batch x steps over the time between the
    # step lines at each epoch's last step (the first epoch from its first step's end).
    ends = {int(s["epoch"]): float(s["time"]) for s in progress(out, "step", "worker:0") if int(s["step"]) == steps}
    [first] = progress(out, "first_step", "worker:0")
    marks = [float(first["time"])] + [ends[i] for i in range(epochs)]
    for i, (_, rate) in enumerate(scalars["examples_per_sec"]):
        n = steps - 1 if i == 0 else steps
        independent = n * global_batch / (marks[i + 1] - marks[i])
        assert rate == pytest.approx(independent, rel=0.2), (i, rate, independent)
    return scalars


def kill_task(spec: Path, key: str, sig: int) -> None:
    pids = wait_for(lambda: task_pids(run_dir(spec).name, key), 30, what=f"{key}'s process")
    for pid in pids:
        os.kill(pid, sig)
