"""A comparison's results: one row per configuration (medians and min-max over ``--repeat``
runs), rendered as results.csv, results.json and report.md. Pure: text in, text out."""

from __future__ import annotations

import csv
import io
import statistics
from typing import Any, Optional, Sequence

from launcher.ui.jsontext import json_text
from launcher.compare.configs import CPU_REPLICA_STRATEGIES, Config
from launcher.compare.measure import OK, Measurement

# Figures reported as the median over the successful runs, with their min and max.
SPREAD = ("time_to_first_step_s", "examples_per_sec", "time_per_epoch_s", "test_accuracy", "time_to_target_s")
MEDIANS = SPREAD + ("examples_per_sec_overall", "train_accuracy", "train_loss", "test_loss", "wall_s", "goodput")

COLUMNS = (
    "config", "strategy", "topology", "tasks", "replicas", "devices", "global_batch", "runs", "ok_runs", "status",
    "time_to_first_step_s", "time_to_first_step_s_min", "time_to_first_step_s_max",
    "examples_per_sec", "examples_per_sec_min", "examples_per_sec_max", "examples_per_sec_overall",
    "time_per_epoch_s", "time_per_epoch_s_min", "time_per_epoch_s_max",
    "train_accuracy", "train_loss", "test_accuracy", "test_accuracy_min", "test_accuracy_max", "test_loss",
    "target_accuracy", "time_to_target_s", "time_to_target_s_min", "time_to_target_s_max",
    "wall_s", "goodput", "exit_code", "error",
)


def median(values: Sequence[Optional[float]]) -> Optional[float]:
    """The median of the values that are there (None if none are)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def spread(values: Sequence[Optional[float]]) -> tuple[Optional[float], Optional[float]]:
    present = [v for v in values if v is not None]
    return (min(present), max(present)) if present else (None, None)


def row(config: Config, runs: Sequence[Measurement], target_accuracy: Optional[float] = None) -> dict[str, Any]:
    """One configuration's row: figures from the runs that succeeded, the error of one that did not."""
    ok = [m for m in runs if m.status == OK]
    failed = [m for m in runs if m.status != OK]
    out: dict[str, Any] = {
        "config": config.label, "strategy": config.strategy, "topology": config.topology, "tasks": config.tasks,
        "replicas": _first(m.replicas for m in runs), "devices": config.devices,
        "global_batch": _first(m.global_batch for m in runs),
        "runs": len(runs), "ok_runs": len(ok),
        "status": OK if runs and not failed else (failed[0].status if not ok else f"{len(ok)}/{len(runs)} ok"),
        "target_accuracy": target_accuracy,
        "exit_code": failed[0].exit_code if failed else (runs[0].exit_code if runs else None),
        "error": failed[0].error if failed else "",
    }
    for name in MEDIANS:
        out[name] = median([getattr(m, name) for m in ok])
    for name in SPREAD:
        out[f"{name}_min"], out[f"{name}_max"] = spread([getattr(m, name) for m in ok])
    return {c: out.get(c) for c in COLUMNS}


def to_csv(rows: Sequence[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if r.get(k) is None else r[k] for k in COLUMNS})
    return buf.getvalue()


def to_json(rows: Sequence[dict], runs: dict[str, list], machine: dict, meta: dict) -> str:
    """``{"meta", "machine", "columns", "configs": [row + "runs": [per run figures]]}``."""
    configs = []
    for r in rows:
        configs.append({**r, "runs": runs.get(r["config"], [])})
    return json_text({"meta": meta, "machine": machine, "columns": list(COLUMNS), "configs": configs},
                     default=str) + "\n"


# ------------------------------------------------------------------ report.md

TABLE = (  # (column, header, format)
    ("config", "configuration", "{}"), ("topology", "tasks", "{}"), ("replicas", "replicas", "{}"),
    ("devices", "devices", "{}"), ("global_batch", "global batch", "{}"),
    ("time_to_first_step_s", "first step (s)", "{:.1f}"), ("examples_per_sec", "examples/s", "{:.0f}"),
    ("examples_per_sec_overall", "examples/s overall", "{:.0f}"),
    ("time_per_epoch_s", "s/epoch", "{:.2f}"), ("train_accuracy", "train acc", "{:.3f}"),
    ("test_accuracy", "test acc", "{:.3f}"), ("test_loss", "test loss", "{:.3f}"),
    ("time_to_target_s", "to target (s)", "{:.1f}"), ("goodput", "goodput", "{:.1%}"), ("status", "status", "{}"),
)


def table(rows: Sequence[dict], repeat: int = 1) -> str:
    """The markdown table; with repeats, ``median (min-max)`` for the spread figures."""
    lines = ["| " + " | ".join(h for _, h, _ in TABLE) + " |", "|" + "---|" * len(TABLE)]
    for r in rows:
        cells = []
        for col, _, fmt in TABLE:
            cell = _cell(r.get(col), fmt)
            if repeat > 1 and col in SPREAD and r.get(col) is not None:
                cell += f" ({_cell(r[col + '_min'], fmt)}-{_cell(r[col + '_max'], fmt)})"
            cells.append(cell.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(rows: Sequence[dict], machine: dict, options: dict) -> list[str]:
    """What the figures mean and do not mean on this machine."""
    out = []
    cores = machine.get("cores")
    gpus = machine.get("gpus") or []
    cpu_split = [r for r in rows if r["strategy"] in CPU_REPLICA_STRATEGIES and "cpus=" in str(r["devices"])]
    if cpu_split and not gpus:
        names = ", ".join(r["config"] for r in cpu_split)
        out.append(f"{names}: the replicas are logical CPU devices (`devices: {{cpus: N}}`) on the same {cores} "
                   "cores; they measure the cost of distributing, not a speed-up.")
    multi = [r for r in rows if (r.get("tasks") or 0) > 1]
    if multi and machine.get("hosts", 1) == 1:
        names = ", ".join(r["config"] for r in multi)
        out.append(f"{names}: every task is a process on this one machine ({cores} cores), talking gRPC over "
                   "localhost; this shows the overhead of a TF cluster, not how it scales across machines.")
    if any(r["strategy"] == "parameter_server" for r in rows):
        out.append("parameter_server: a step is one worker's batch (its global batch column), workers step "
                   "asynchronously, and the test accuracy is the chief's evaluation of a copy of the weights.")
    out.append("Every configuration trains the same entrypoint (model, data, seed, per-replica batch, epochs): "
               "the global batch grows with the replicas, so those configurations take fewer, larger steps for "
               "the same examples, which changes how fast accuracy rises per example.")
    out.append("examples/s: median over the intervals between progress lines after each run's first step "
               "(tracing and warm-up excluded; an interval that holds an epoch's test evaluation is an outlier "
               "the median ignores): the speed of training steps. examples/s overall: the worker's own figure, "
               "from the first step's end to the last step's end, so it also pays for every epoch's checkpoint, "
               "backup and test evaluation. s/epoch: between consecutive epoch lines, including the per-epoch test "
               "evaluation. First step and time to target: from the launcher starting the tasks (Python and "
               "TensorFlow start-up, data loading and tracing included).")
    load = machine.get("load_average")
    if load:
        out.append(f"Load average (1 min) was {load.get('start')} at the start and {load.get('end')} at the end on "
                   f"{cores} cores: other work on the machine shows in these figures"
                   + ("; see the min-max over repeats." if options.get("repeat", 1) > 1 else
                      "; use --repeat N for medians and min-max."))
    for r in rows:
        if r["status"] != OK:
            out.append(f"{r['config']} {r['status']}: {r['error'] or 'see its run record'}")
    return out


def markdown(rows: Sequence[dict], machine: dict, meta: dict, plots: Sequence[str]) -> str:
    """report.md: the command, the machine, the table, the notes, the plots."""
    gpus = machine.get("gpus") or []
    lines = [
        f"# tfcluster compare {meta.get('id', '')}",
        "",
        f"`{meta.get('command', '')}`",
        "",
        "## Machine",
        "",
        f"- CPU: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores",
        f"- GPUs: {', '.join(gpus) if gpus else 'none'}",
        f"- TensorFlow {machine.get('tensorflow', '?')}, Python {machine.get('python', '?')}, "
        f"{machine.get('platform', '?')}",
        f"- started {meta.get('started', '?')}, {meta.get('repeat', 1)} run(s) per configuration"
        + (f", target accuracy {meta['target_accuracy']}" if meta.get("target_accuracy") is not None else ""),
        "",
        "## Results",
        "",
        table(rows, meta.get("repeat", 1)),
        "",
        "## Notes",
        "",
    ]
    lines += [f"- {n}" for n in notes(rows, machine, meta)]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{p}]({p})" for p in plots]
    lines += ["", "Per-run figures, curves and run records: results.json; TensorBoard: "
              "`tensorboard --logdir tensorboard` in this directory.", ""]
    return "\n".join(lines)


def _cell(value: Any, fmt: str) -> str:
    if value is None or value == "":
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _first(values) -> Any:
    return next((v for v in values if v is not None), None)
