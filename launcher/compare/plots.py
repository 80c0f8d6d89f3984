"""The comparison's plots (matplotlib, PNG, no display needed).

    throughput.png   examples/s per configuration (bar; min-max whiskers with repeats)
    accuracy.png     test accuracy after every epoch against wall-clock time and against
                     examples seen, one line per configuration (the first run of each)
    epoch_time.png   time per epoch against replicas, one point per configuration
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

FILES = ("throughput.png", "accuracy.png", "epoch_time.png")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_all(rows: Sequence[dict], runs: dict[str, list], outdir: Path, title: str = "") -> list[str]:
    """Write the three plots into ``outdir``; returns their file names."""
    plt = _pyplot()
    try:
        throughput(plt, rows, outdir / FILES[0], title)
        accuracy(plt, rows, runs, outdir / FILES[1], title)
        epoch_time(plt, rows, outdir / FILES[2], title)
    finally:
        plt.close("all")
    return list(FILES)


def throughput(plt, rows: Sequence[dict], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    labels = [r["config"] for r in rows]
    values = [r["examples_per_sec"] or 0 for r in rows]
    low = [max(0.0, v - (r["examples_per_sec_min"] if r["examples_per_sec_min"] is not None else v))
           for v, r in zip(values, rows)]
    high = [max(0.0, (r["examples_per_sec_max"] if r["examples_per_sec_max"] is not None else v) - v)
            for v, r in zip(values, rows)]
    colors = ["C0" if r["examples_per_sec"] is not None else "lightgrey" for r in rows]
    bars = ax.bar(labels, values, color=colors, yerr=[low, high] if any(low + high) else None, capsize=4)
    for bar, r in zip(bars, rows):
        text = f"{r['examples_per_sec']:.0f}" if r["examples_per_sec"] is not None else r["status"]
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("training examples/s (median after warm-up)")
    ax.set_title(f"Throughput per configuration{' - ' + title if title else ''}")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path)


def accuracy(plt, rows: Sequence[dict], runs: dict[str, list], path: Path, title: str) -> None:
    fig, (by_time, by_examples) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=100, sharey=True)
    for r in rows:
        curve = next((run["curve"] for run in runs.get(r["config"], []) if run.get("curve")), [])
        if not curve:
            continue
        accuracy = [c["test_accuracy"] for c in curve]
        by_time.plot([c["elapsed_s"] for c in curve], accuracy, marker="o", label=r["config"])
        by_examples.plot([c["examples"] for c in curve], accuracy, marker="o", label=r["config"])
    target = next((r.get("target_accuracy") for r in rows if r.get("target_accuracy") is not None), None)
    for ax in (by_time, by_examples):
        if target is not None:
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    by_time.set_xlabel("wall-clock since the tasks were started (s)")
    by_examples.set_xlabel("training examples seen")
    by_time.set_ylabel("test accuracy (after each epoch)")
    by_time.set_ylim(0, 1.02)
    by_examples.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Test accuracy{' - ' + title if title else ''}")
    fig.tight_layout()
    fig.savefig(path)


def epoch_time(plt, rows: Sequence[dict], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for i, r in enumerate(rows):
        if r["time_per_epoch_s"] is None or r["replicas"] is None:
            continue
        y = r["time_per_epoch_s"]
        err = None
        if r["time_per_epoch_s_min"] is not None and r["time_per_epoch_s_max"] is not None:
            err = [[y - r["time_per_epoch_s_min"]], [r["time_per_epoch_s_max"] - y]]
        ax.errorbar([r["replicas"]], [y], yerr=err, fmt="o", color=f"C{i % 10}", capsize=4, label=r["config"])
        ax.annotate(r["config"], (r["replicas"], y), fontsize=8, xytext=(5, 3), textcoords="offset points")
    ax.set_xlabel("replicas in sync")
    ax.set_ylabel("time per epoch (s)")
    ax.set_ylim(bottom=0)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.set_title(f"Time per epoch against replicas{' - ' + title if title else ''}")
    fig.tight_layout()
    fig.savefig(path)
