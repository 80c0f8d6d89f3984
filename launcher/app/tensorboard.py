"""``tfcluster tensorboard FILE``: TensorBoard on the logs of the latest run of a spec.

The logdir is ``runs/<name>/state/tensorboard``: ``python -m worker`` writes ``train/`` (the
chief's scalars per epoch) and ``eval/`` (the evaluator's per checkpoint) there, and a user's
script may add its own runs (for example ``tf.keras.callbacks.TensorBoard`` pointed at
``$TFCLUSTER_STATE_DIR/tensorboard/<run>``). The state dir is shared by every run of the spec,
so a resumed run continues the same curves at its global step.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional

from launcher.contract import statedir
from launcher.notices import Notices
from launcher.app.results import TensorBoardResult
from launcher.errors import LaunchError, NoRun, SpecError
from launcher.record.states import Outcome
from launcher.record.layout import runs_dir, state_dir
from launcher.record.reader import latest_run
from launcher.spec.model import LoadedSpec

STOP_TIMEOUT = 10.0  # seconds TensorBoard gets to exit after Ctrl-C before it is killed


def find_program() -> Optional[str]:
    """The ``tensorboard`` script of tfcluster's own Python environment, else one on PATH."""
    beside = Path(sys.executable).parent / "tensorboard"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("tensorboard")


def logdir_of(loaded: LoadedSpec) -> Path:
    """The logdir of the spec's latest run; a one-line error if there is no run or no logs yet."""
    spec = loaded.spec
    root = runs_dir(loaded)
    if latest_run(root, spec.name) is None:
        raise NoRun(f"no run of '{spec.name}' yet (nothing under {root / spec.name}); "
                          f"start one with 'tfcluster up {loaded.path}'")
    logdir = state_dir(root, spec.name) / statedir.TENSORBOARD
    if not logdir.is_dir():
        raise LaunchError(f"no TensorBoard logs in {logdir} yet: python -m worker writes them at the end of the "
                          "first epoch (a script of your own: write to $TFCLUSTER_STATE_DIR/"
                          f"{statedir.TENSORBOARD}/<name>); on backend ssh they come back from the chief's host "
                          "after a successful run (state.fetch)")
    return logdir


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tensorboard(loaded: LoadedSpec, console: Notices, port: int = 6006) -> TensorBoardResult:
    """Serve the spec's TensorBoard logs on ``port`` until Ctrl-C (interrupted) or the server
    ends by itself (its exit status, if not 0, in the result: failed)."""
    if not 1 <= port <= 65535:
        raise SpecError(f"--port {port}: not a TCP port; give one in 1-65535")
    logdir = logdir_of(loaded)
    program = find_program()
    if program is None:
        raise LaunchError(f"tensorboard is not installed (not beside {sys.executable}, not on PATH); "
                          "install it with: pip install tensorboard (the [tf] extra includes it)")
    if not port_free(port):
        raise LaunchError(f"--port {port}: the port is in use (another TensorBoard?); choose another with --port N")
    runs = sorted(p.name for p in logdir.iterdir() if p.is_dir())
    console.info(f"TensorBoard on {logdir} (runs: {', '.join(runs) or 'none yet'}) at http://localhost:{port}/ ; "
                 "Ctrl-C stops it")
    proc = subprocess.Popen([program, "--logdir", str(logdir), "--port", str(port)])
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        _stop(proc)
        return TensorBoardResult(Outcome.INTERRUPTED)
    return TensorBoardResult(Outcome.SUCCEEDED if code == 0 else Outcome.FAILED, server_exit=code)


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C reaches TensorBoard from the terminal too; SIGINT it here as well (no terminal:
    the signal came to tfcluster alone), then kill it if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)
