"""The plan as ``tfcluster plan`` and ``up --dry-run`` print it: a row per task (host, GPUs,
address, command), TF_CONFIG (the cluster once), the threads, GPUs and standby lines, the env every
task shares (secrets redacted unless asked)."""

from __future__ import annotations

import shlex
from typing import Sequence

from launcher.bounded import escape
from launcher.contract import envnames
from launcher.plan.build import Plan, redact_command, redact_env
from launcher.plan.gputext import show_gpus
from launcher.ui.table import render


def render_plan(plan: Plan, show_secrets: bool = False, spares: Sequence[str] = (), standby: str = "",
                notes: Sequence[str] = ()) -> str:
    """The plan as ``tfcluster plan`` and ``up --dry-run`` print it; ``spares``: the hosts no
    task uses, where a lost host's tasks move (launcher/plan/elastic.py)."""
    gpu_column = show_gpus(plan)
    headers = ("task", "host") + (("gpus",) if gpu_column else ()) + ("address:port", "command")
    rows = []
    joined: dict[tuple[str, ...], str] = {}  # the tasks share one command: quoted once
    for t in plan.tasks:
        command = joined.get(t.command) or joined.setdefault(
            t.command, shlex.join(t.command if show_secrets else redact_command(t.command)))
        rows.append((t.key, t.host) + ((t.gpus.describe(),) if gpu_column else ())
                    + (t.endpoint or "(no port: not in cluster)", command))
    out = [f"plan {plan.name}: {plan.strategy} on backend {plan.backend}, {len(plan.tasks)} tasks"]
    if plan.placeholder:
        out.append(f"placeholder placement: {plan.placement_note or 'hosts are known only after allocation'}; "
                   "hosts, addresses and TF_CONFIG below are stand-ins")
    out += render(headers, rows)
    if spares:
        out.append(f"spare hosts: {', '.join(spares)} (no task; a lost host's tasks move there)")
    out += [note for note in notes if note]  # (a worker group that starts with the hosts there)
    if plan.cluster is None:  # single-host strategies: the task's role only
        out.append("TF_CONFIG:")
        out.extend(f"  {t.key}: {t.tf_config_json}" for t in plan.tasks)
    else:  # the cluster once (a copy per task is O(n²)), then each task's own part
        out.append('TF_CONFIG (every task: {"cluster":CLUSTER,"task":TASK}):')
        out.append(f"  CLUSTER: {plan.cluster.json_text}")
        out.extend(f"  {t.key}: TASK {t.task_json}" for t in plan.tasks)
    if plan.threads:
        out.append(plan.threads)
    if plan.gpus:
        out.append(plan.gpus)
    if standby:
        out.append(standby)  # launcher/supervise/standby.py's plan_line
    if plan.tasks:
        common = {k: v for k, v in plan.tasks[0].base_env if not k.startswith(envnames.TASK)}
        for env in {id(t.base_env): t.base_env for t in plan.tasks}.values():  # a few shared tuples
            if env is not plan.tasks[0].base_env:
                own = dict(env)
                common = {k: v for k, v in common.items() if own.get(k) == v}
        shown = common if show_secrets else redact_env(common)
        out.append("env (every task, plus TF_CONFIG and TFCLUSTER_TASK):")
        for k, v in shown.items():
            out.append(f"  {k}={v}")
    return "\n".join(escape(line) for line in out)  # (a spec's value with an escape sequence: shown, not run)
