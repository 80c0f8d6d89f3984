"""Running a comparison: each configuration (x ``--repeat``) through ``tfcluster up``'s own path
(derived spec -> plan -> backend -> supervisor -> run record), one after another, with a live
progress line; then the figures from the run records, the tables, the plots and TensorBoard
logs in ``runs/<name>/compare/<id>/``::

    specs/<config>[-rN].yaml     the derived spec each configuration (run) ran
    runs/<name>-<config>/<id>/   its run record (events.jsonl, logs/, state/)
    logs/<config>.txt            the launcher's messages for it
    results.csv, results.json    one row per configuration (results.json adds every run's curve)
    report.md                    the table, the machine, notes and the plots
    throughput.png, accuracy.png, epoch_time.png
    tensorboard/<config>/        scalars per configuration: tensorboard --logdir tensorboard
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import secrets
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, TextIO

import yaml

from launcher.system.procinfo import OutputTooLarge, run_bounded
from launcher.plan.build import is_secret
from launcher.safefile import write_whole
from launcher.app.up import run_spec
from launcher.app.sinks import RunConsole
from launcher.notices import Notices
from launcher.errors import UserError
from launcher.contract import progress
from launcher.contract.progress import parse
from launcher.record.layout import COMPARE_DIR, name_dir, progress_path
from launcher.record.reader import read_events
from launcher.record.feed import replay
from launcher.record.states import Outcome
from launcher.loader.load import LoadedSpec, load_spec, parse_spec
from launcher.compare import plots, report, tensorboard
from launcher.compare.configs import Config, Options, configurations
from launcher.compare.measure import FAILED, INTERRUPTED, OK, Measurement, measure


class ProgressLine:
    """``[2/5] mirrored (worker:1, cpus=2): epoch 1, step 20, 14 s``: rewritten in place on a
    terminal each second; elsewhere printed when the phase changes."""

    def __init__(self, out: TextIO, prefix: str) -> None:
        self.out = out
        self.tty = out.isatty()
        self.prefix = prefix
        self.started = time.time()
        self.log: Optional[Path] = None
        self._offset = 0
        self._partial = ""
        self.phase = "starting"
        self._shown = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="compare-progress", daemon=True)

    def __enter__(self) -> "ProgressLine":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def follow(self, log: Path) -> None:
        self.log = log

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._read()
            self._show()

    def _read(self) -> None:
        if self.log is None:
            return
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", "replace")
        *lines, self._partial = text.split("\n")
        for line in lines:
            p = parse(line)
            if p is None:
                continue
            if isinstance(p, progress.StartLine):  # (its figures as printed)
                self.phase = f"training ({p.get('replicas', '?')} replica(s), global batch {p.get('global_batch', '?')})"
            elif isinstance(p, (progress.StepLine, progress.EpochLine)):
                shown = p.epoch + 1 if isinstance(p, progress.StepLine) and p.epoch is not None else p.epoch
                acc = p.get("test_accuracy")
                self.phase = (f"epoch {shown}, step {p.get('global_step', '?')}"
                              + (f", test accuracy {acc}" if acc else ""))
            elif isinstance(p, progress.ResultLine):
                self.phase = "evaluated, saving"

    def _show(self) -> None:
        line = f"{self.prefix}: {self.phase}"
        if self.tty:
            self.out.write(f"\r\033[K{line}, {time.time() - self.started:.0f} s")
            self.out.flush()
        elif line != self._shown:
            self.out.write(f"{line}, {time.time() - self.started:.0f} s\n")
            self.out.flush()
        self._shown = line

    def done(self, text: str) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.out.write(("\r\033[K" if self.tty else "") + f"{self.prefix}: {text}\n")
        self.out.flush()


def machine_info(hosts: int = 1) -> dict:
    """What the figures ran on: CPU model, cores, GPUs, TensorFlow, Python, load."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    gpus: list[str] = []
    try:
        _code, out, _err = run_bounded(["nvidia-smi", "-L"], 15, out_bytes=1 << 20)  # (ends its group and pipes)
        gpus = [line.strip() for line in out.decode("utf-8", "replace").splitlines() if line.startswith("GPU")]
    except (OSError, subprocess.SubprocessError, OutputTooLarge):
        pass
    try:
        tf_version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tf_version = "not installed here"
    return {"cpu": cpu, "cores": cores, "gpus": gpus, "tensorflow": tf_version,
            "python": platform.python_version(), "platform": f"{platform.system()} {platform.release()}",
            "hosts": hosts, "load_average": {"start": round(os.getloadavg()[0], 2)}}


def compare(paths: Sequence[str], options: Options, console: Notices, argv: Sequence[str] = (), *,
            exit_code_of: Callable[[str], int], captured: Callable[[TextIO], RunConsole]) -> Outcome:
    """Run the comparison: SUCCEEDED if every configuration succeeded, FAILED if one did (every
    output is still written, the failure is its row), INTERRUPTED; a bad spec raises SpecError.
    ``exit_code_of``: the CLI's mapping of an outcome to an exit code, for the report's exit_code
    column (what `tfcluster up` of that run exits with); ``captured(file)``: the CLI's console for one
    configuration's supervisor, its messages written to ``file`` and its tasks' lines left to the record."""
    loaded = [load_spec(p) for p in paths]  # every file valid before anything runs
    first = loaded[0]
    compare_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    outdir = name_dir(first) / COMPARE_DIR / compare_id
    sources = [(str(ls.path), yaml.safe_load(ls.text)) for ls in loaded]  # (as validated: read once)
    configs = configurations(sources, options, str(outdir / "runs"))
    for d in ("specs", "logs"):
        (outdir / d).mkdir(parents=True, exist_ok=True)
    hosts = max(len({h.name for h in ls.spec.hosts}) or 1 for ls in loaded)
    machine = machine_info(hosts)
    meta = {"id": compare_id, "command": "tfcluster " + shlex.join(list(argv)) if argv else "tfcluster compare",
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "repeat": options.repeat,
            "target_accuracy": options.target_accuracy, "strategies": list(options.strategies),
            "specs": [str(ls.path) for ls in loaded]}
    console.info(f"compare {compare_id}: {len(configs)} configuration(s) x {options.repeat} run(s); "
                 f"results in {outdir}")
    results: dict[str, list[Measurement]] = {c.label: [] for c in configs}
    extras: dict[str, list[dict]] = {c.label: [] for c in configs}
    total = len(configs) * options.repeat
    interrupted = False
    k = 0
    try:
        for repeat in range(options.repeat):
            for config in configs:
                k += 1
                m, extra = _run_one(config, repeat, options, outdir, captured, f"[{k}/{total}] {config.label}"
                                    + (f" (run {repeat + 1})" if options.repeat > 1 else ""))
                if m.outcome is not None:
                    m.exit_code = exit_code_of(m.outcome)
                results[config.label].append(m)
                extras[config.label].append(extra)
                if m.status == INTERRUPTED:
                    raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
        console.error("interrupted; writing the results of the runs that finished")
    machine["load_average"]["end"] = round(os.getloadavg()[0], 2)
    rows = [report.row(c, results[c.label], options.target_accuracy) for c in configs if results[c.label]]
    runs = {label: [{**m.to_json(), **extra} for m, extra in zip(results[label], extras[label])]
            for label in results}
    _write_outputs(outdir, rows, runs, machine, meta, console)
    if interrupted:
        return Outcome.INTERRUPTED
    return Outcome.SUCCEEDED if all(r["status"] == OK for r in rows) else Outcome.FAILED


def write_derived_spec(path: Path, spec: dict, header: str) -> str:
    """A derived spec for ``up`` to run, its text returned: readable by its owner only (0600) when
    its ``env`` holds a secret (``is_secret``), which it must keep in clear for the tasks to get it."""
    text = header + yaml.safe_dump(spec, sort_keys=False, default_flow_style=None)
    env = spec.get("env") or {}
    private = isinstance(env, dict) and any(is_secret(str(k), str(v)) for k, v in env.items())
    write_whole(path, text, mode=0o600 if private else 0o644, fsync=False)
    return text


def _run_one(config: Config, repeat: int, options: Options, outdir: Path,
             captured: Callable[[TextIO], RunConsole], prefix: str) -> tuple[Measurement, dict]:
    spec = dict(config.spec)
    suffix = f"-r{repeat + 1}" if options.repeat > 1 else ""
    spec["name"] = spec["name"] + suffix
    spec_path = outdir / "specs" / f"{config.label}{suffix}.yaml"
    text = write_derived_spec(spec_path, spec, f"# tfcluster compare: {config.label}, derived from {config.source}\n")
    extra = {"label": config.label, "repeat": repeat + 1, "spec": str(spec_path), "record": None}
    records: list = []
    with open(outdir / "logs" / f"{config.label}{suffix}.txt", "w") as sink, \
            ProgressLine(sys.stderr, prefix) as line:
        def on_record(record) -> None:
            records.append(record)
            extra["record"] = str(record.dir)
            line.follow(progress_path(record.dir, record.plan.success_task))

        try:
            # Relative paths (workdir, docker build context, ...) resolve against the source spec.
            loaded = LoadedSpec(parse_spec(text, shown=str(spec_path)), Path(config.source))
            # Its plan, placed by the backend, then the stages tfcluster up runs from there.
            result = run_spec(loaded, captured(sink), on_record=on_record)
        except UserError as exc:
            m = Measurement(status=FAILED, exit_code=exc.exit_code, error=" / ".join(exc.lines))
            line.done(f"failed: {m.error}")
            return m, extra
        except KeyboardInterrupt:
            m = Measurement(status=INTERRUPTED, outcome=Outcome.INTERRUPTED, error="interrupted")
            line.done("interrupted")
            return m, extra
        record = records[0]
        events = read_events(record.dir)
        try:
            lines = progress_path(record.dir, record.plan.success_task).read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        m = measure(events, lines, options.target_accuracy)
        g = replay(record.dir).goodput(time.time())  # (at the run's end: it has its outcome)
        if g is not None:
            m.goodput, m.badput = round(g.fraction, 4), {c: round(s, 3) for c, s in g.badput.items()}
        m.outcome = result.outcome  # (the caller's mapping gives it the exit code `tfcluster up` would)
        if m.status == OK and result.outcome != Outcome.SUCCEEDED:
            m.status = FAILED
        if m.status == OK:
            line.done(f"ok in {m.wall_s or 0:.0f} s: {m.examples_per_sec or 0:.0f} examples/s, "
                      f"test accuracy {m.test_accuracy if m.test_accuracy is not None else '?'}")
        else:
            line.done(f"{m.status}: {m.error}")
        extra["state"] = str(record.state_dir)
    return m, extra


def _write_outputs(outdir: Path, rows: list, runs: dict, machine: dict, meta: dict, console: Notices) -> None:
    (outdir / "results.csv").write_text(report.to_csv(rows))
    (outdir / "results.json").write_text(report.to_json(rows, runs, machine, meta))
    written: list[str] = []
    try:
        written = plots.plot_all(rows, runs, outdir, title=meta["id"])
    except ImportError:
        console.error("matplotlib is not installed, so no plots; pip install 'tfcluster[compare]'")
    if tensorboard.available():
        for label, label_runs in runs.items():
            for run in label_runs:
                name = label if len(label_runs) == 1 else f"{label}-r{run['repeat']}"
                state = Path(run["state"]) / "tensorboard" if run.get("state") else None
                tensorboard.write_run(outdir / "tensorboard" / name, run, state)
    else:
        console.error("tensorboard is not installed, so no TensorBoard logs; pip install 'tfcluster[compare]'")
    (outdir / "report.md").write_text(report.markdown(rows, machine, meta, written))
    print(report.table(rows, meta["repeat"]))
    console.info(f"wrote {outdir}/: results.csv, results.json, report.md"
                 + (", " + ", ".join(written) if written else "") + ", tensorboard/")
