"""Where a run record lives and what its files are called: the one place these names are spelled.

Under the spec's runs dir (``runs_dir``: ``<spec dir>/<run_dir>``)::

    <name>/<run id>/plan.json        the plan as executed (secrets redacted)
    <name>/<run id>/events.jsonl     one JSON object per event (``events.Event``), the outcome last
    <name>/<run id>/logs/<type>-<index>.log   each task's output, all attempts, as it wrote it (``log_path``)
    <name>/<run id>/logs/<type>-<index>.progress   what it said on its control channel (``progress_path``):
                                     its progress records and standby protocol, beats left out
    <name>/<run id>/output.log       every task's output interleaved as it arrived, "[type:index] ..."
    <name>/<run id>/supervisor.log   a detached supervisor's own messages (``up --detach``)
    <name>/<run id>/snapshot.json    the replayed view now and then, with the byte offsets of events.jsonl
                                     and each task log it covers (launcher/record/feed.py): ``status`` and
                                     ``attach`` replay only what came after it
    <name>/<run id>/launcher.json    the launcher's pid and each task's pid/pgid, and the backend's
                                     allocation (``RunRecord.allocated``), for ``tfcluster down``
    <name>/<run id>/<backend>.json   that allocation on its own (``allocation_path``; slurm.json:
                                     the job id, then its nodes and their addresses)
    <name>/latest -> <run id>
    <name>/state/                    checkpoints and backups, shared by every run of this name so a
                                     rerun resumes where the last one stopped (``state_dir``)
    <name>/compare/<id>/             a ``tfcluster compare`` (launcher/compare/run.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from launcher.contract import statedir

if TYPE_CHECKING:  # pragma: no cover
    from launcher.spec.model import LoadedSpec

PLAN_FILE = "plan.json"
EVENTS_FILE = "events.jsonl"
OUTPUT_FILE = "output.log"
SUPERVISOR_LOG = "supervisor.log"
LAUNCHER_FILE = "launcher.json"
SNAPSHOT_FILE = "snapshot.json"
# The files of a run directory, by name (an allocation file is named after its backend).
RECORD_FILES = (PLAN_FILE, EVENTS_FILE, OUTPUT_FILE, SUPERVISOR_LOG, LAUNCHER_FILE, SNAPSHOT_FILE)
LOGS_DIR = "logs"
STATE_DIR = "state"
LATEST = "latest"
COMPARE_DIR = "compare"


def runs_dir(loaded: "LoadedSpec") -> Path:
    """The runs dir of this spec: its ``run_dir``, relative to the spec file."""
    return loaded.base_dir / loaded.spec.run_dir


def name_dir(loaded: "LoadedSpec") -> Path:
    """Where the runs of this spec (its name) are: ``<runs dir>/<name>``."""
    return runs_dir(loaded) / loaded.spec.name


def state_dir(root: Path, name: str) -> Path:
    """The state dir every local run of ``name`` under runs dir ``root`` shares (and the ssh
    backend fetches into)."""
    return root / name / STATE_DIR


def later_plan_name(number: int) -> str:
    """A run's plan ``number`` (2, 3, ...) after hosts were lost (launcher/plan/elastic.py), written
    next to ``plan.json`` (the first): ``plan-2.json``."""
    return f"plan-{number}.json"


def log_path(run_dir: Path, key: str) -> Path:
    """``<run>/logs/<type>-<index>.log``: the one place a task's log file is named."""
    return run_dir / LOGS_DIR / (key.replace(":", "-") + ".log")


def progress_path(run_dir: Path, key: str) -> Path:
    """``<run>/logs/<type>-<index>.progress``: the task's control lines (launcher/remote/taskstream.py)
    but its beats, one a line: its progress records (``tfcluster-step ...``), read by ``progress.parse``,
    and a standby's protocol (``(standby) tfcluster-standby ready ...``). Only tfcluster writes it:
    nothing the task prints lands there."""
    return run_dir / LOGS_DIR / (key.replace(":", "-") + ".progress")


def stacks_path(run_dir: Path, attempt: int, key: str) -> Path:
    """``<run>/stacks/<attempt>/<type>-<index>.txt`` (attempt 1 = the first): a task's every thread's
    stack, taken when its group stopped progressing (launcher/supervise/hangwatch.py)."""
    return run_dir / "stacks" / str(attempt) / (key.replace(":", "-") + ".txt")


def live_stacks_dir(run_dir: Path) -> Path:
    """``<run>/stacks/live/``: every live task's stacks as ``tfcluster stacks`` last asked for them
    (``<type>-<index>.txt``), and ``done`` (JSON: when, and each task's note) once written."""
    return run_dir / "stacks" / "live"


def allocation_path(run_dir: Path, backend: str) -> Path:
    """``<run>/<backend>.json``: what a backend allocated for the run (``RunRecord.allocated``)."""
    return run_dir / f"{backend}.json"


def locations(state_dir: Path, logs_dir: Path) -> dict[str, str]:
    """Where the final model, checkpoints and TensorBoard logs are (those that exist on this
    machine), the state dir, and the task logs: the outcome event's ``locations``."""
    where: dict[str, str] = {}
    for label, name in (("final model", statedir.FINAL_MODEL), ("checkpoints", statedir.CHECKPOINTS),
                        ("TensorBoard logs", statedir.TENSORBOARD)):
        path = state_dir / name
        if path.exists():
            where[label] = str(path)
    where["state dir"] = str(state_dir)
    where["task logs"] = str(logs_dir)
    return where
