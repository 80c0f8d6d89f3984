"""What the benchmarks share: the repository root on ``sys.path`` (for ``launcher`` and the
``tests`` helpers), one cluster.yaml writer for the local backend, ``Background`` (a command's
lines as they come) with ``BackgroundUp``, and the Rss and Pss of a set of processes."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.ports import free_base  # noqa: E402


def _compiled() -> None:
    """The checkout's modules compiled (a look at each file's time when they are): a user's
    installed tfcluster has them compiled (pip does it), an editable checkout has not, and where
    PYTHONDONTWRITEBYTECODE is set, as this machine's environment sets it, every process a
    benchmark starts (``up``, the wrappers, the agents, the worker) would compile them again:
    0.24 s of ``up``'s own imports, a cost the user does not pay (tests/run.sh does the same)."""
    import compileall

    for part in ("launcher", "worker", "bench", "tests"):
        compileall.compile_dir(str(ROOT / part), quiet=2)


_compiled()


def load_average() -> str:
    """The machine's 1/5/15-minute load averages, as /proc/loadavg gives them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def memory_of(pids) -> tuple[int, int]:
    """The sums of ``pids``' Rss and Pss in bytes (/proc/PID/smaps_rollup); a process gone counts 0."""
    rss = pss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return rss, pss


def pss_of(pids) -> int:
    """The sum of ``pids``' Pss in bytes (/proc/PID/smaps_rollup); a process gone counts 0."""
    return memory_of(pids)[1]


def write_spec(work: Path, entrypoint: str, tfds_dir: Path, *, name: str = "bench",
               strategy: str = "multi_worker_mirrored", tasks: str = "{worker: 2}", extra: str = "") -> Path:
    """``work/cluster.yaml`` for a local run of ``entrypoint`` on fresh ports, with the offline
    dataset in ``tfds_dir``; ``extra`` is appended YAML (restart, watchdog ...)."""
    spec = work / "cluster.yaml"
    spec.write_text(textwrap.dedent(f"""\
        name: {name}
        strategy: {strategy}
        entrypoint: {entrypoint}
        tasks: {tasks}
        ports: {{base: {free_base(8)}}}
        env: {{PYTHONPATH: {ROOT}, TFDS_DATA_DIR: {tfds_dir}, TF_CPP_MIN_LOG_LEVEL: "2"}}
    """) + textwrap.dedent(extra))
    return spec


class Background:
    """A command (``argv``, from the repository root, in a session of its own) in the background;
    its lines (stdout and stderr), each with the time it arrived."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_line(self, pattern: str, timeout: float = 300, after: float = 0.0) -> float:
        """When the first line matching ``pattern`` (arrived at or after ``after``) came."""
        end = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < end:
            for at, line in list(self.lines):
                if at >= after and regex.search(line):
                    return at
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"no line matching {pattern!r} (exit {self.proc.poll()}); last lines:\n"
                           + "\n".join(line for _, line in self.lines[-30:]))

    def finish(self, timeout: float = 400) -> int:
        code = self.proc.wait(timeout)
        self.reader.join(10)
        return code


class BackgroundUp(Background):
    """``tfcluster up --plain --verbose SPEC`` in the background: ``--verbose`` for the tasks'
    progress records in its lines as they came (``[worker:0] tfcluster-step ...``: their control
    channels', which plain lines otherwise show as people's lines), which the benchmarks time."""

    def __init__(self, spec: Path, env: dict | None = None, python: str = sys.executable) -> None:
        super().__init__([python, "-m", "launcher", "up", "--plain", "--verbose", str(spec)], env)

    def restarted_once(self, code: int, work: Path, died: float) -> str:
        """The run's output, its lines kept in ``work``/lines.txt (times from ``died``, the kill);
        SystemExit unless it exited 0 after exactly one restart."""
        out = "\n".join(line for _, line in self.lines)
        (work / "lines.txt").write_text("".join(f"{t - died:+9.3f} {line}\n" for t, line in self.lines))
        if code != 0 or "run succeeded after 2 attempt(s)" not in out:
            raise SystemExit(f"run failed ({code}) or not one restart; see {work}:\n{out[-3000:]}")
        return out
