#!/usr/bin/env python3
"""Give a JobSet pod its TF_CONFIG, then become its entrypoint (``tfcluster export --to jobset``).

Standalone and stdlib-only: the worker image has it as /usr/local/lib/tfcluster/jobsetpod.py
(docker/Dockerfile), and every container of an exported JobSet runs::

    python /usr/local/lib/tfcluster/jobsetpod.py --layout JSON --type TYPE [--task-var NAME] -- ARGV...

* ``--layout``: the cluster as the export wrote it, ``{"jobset": NAME, "subdomain": SUB, "port":
  PORT, "cluster": [[TYPE, COUNT], ...]}`` (``cluster`` in TF_CONFIG's order, the evaluator not in
  it; ``null`` for a single-host strategy, whose TF_CONFIG is the task alone).
* The task's index is ``JOB_COMPLETION_INDEX``, which Kubernetes sets in every pod of an Indexed Job.
* Each member's address is its JobSet hostname ``<jobset>-<type>-0-<index>.<subdomain>:<port>``
  (``network.enableDNSHostnames``; one Job per type, so the job index is 0).
* It sets TF_CONFIG to what ``tfcluster plan --json`` gives that task (the same JSON, compact, with
  those addresses) and, with ``--task-var``, that variable to ``TYPE:INDEX`` (TFCLUSTER_TASK), then
  ``os.execvp``s ARGV: the entrypoint replaces this process (same PID, signals, exit code).
* A missing or bad index or layout is one line on stderr and exit 2 (the entrypoint not started).
"""

from __future__ import annotations

import json
import os
import sys

INDEX_VAR = "JOB_COMPLETION_INDEX"
USAGE = "usage: jobsetpod.py --layout JSON --type TYPE [--task-var NAME] -- ARGV..."


def hostname(layout: dict, task_type: str, index: int) -> str:
    """The pod's stable name in the JobSet's subdomain."""
    return f"{layout['jobset']}-{task_type}-0-{index}.{layout['subdomain']}"


def tf_config(layout: dict, task_type: str, index: int) -> str:
    """TF_CONFIG for task ``task_type:index`` of ``layout``, spelled as the plan spells it."""
    task = {"type": task_type, "index": index}
    if layout.get("cluster") is None:
        return json.dumps({"task": task}, separators=(",", ":"))
    port = layout["port"]
    cluster = {t: [f"{hostname(layout, t, i)}:{port}" for i in range(count)] for t, count in layout["cluster"]}
    return json.dumps({"cluster": cluster, "task": task}, separators=(",", ":"))


def _parse(argv: list[str]) -> tuple[dict, str, str, list[str]]:
    if "--" not in argv:
        raise ValueError(f"no '--' before the entrypoint; {USAGE}")
    cut = argv.index("--")
    opts, command = argv[:cut], argv[cut + 1:]
    if not command:
        raise ValueError(f"no entrypoint after '--'; {USAGE}")
    values = {}
    for i in range(0, len(opts), 2):
        if opts[i] not in ("--layout", "--type", "--task-var") or i + 1 >= len(opts):
            raise ValueError(f"bad option {opts[i]!r}; {USAGE}")
        values[opts[i]] = opts[i + 1]
    if "--layout" not in values or "--type" not in values:
        raise ValueError(f"--layout and --type are required; {USAGE}")
    layout = json.loads(values["--layout"])
    if not isinstance(layout, dict):
        raise ValueError("--layout: not a JSON object")
    return layout, values["--type"], values.get("--task-var", ""), command


def _index(layout: dict, task_type: str) -> int:
    raw = os.environ.get(INDEX_VAR, "")
    if not raw.isdigit():
        raise ValueError(f"{INDEX_VAR}={raw[:40]!r}: not an index; run this in a pod of an Indexed Job "
                         "(completionMode: Indexed), which Kubernetes gives the variable")
    index = int(raw)
    counts = dict(layout.get("cluster") or [])
    if task_type in counts and index >= counts[task_type]:
        raise ValueError(f"{INDEX_VAR}={index}: the layout has {counts[task_type]} {task_type} task(s)")
    return index


def main(argv: list[str]) -> int:
    try:
        layout, task_type, task_var, command = _parse(argv)
        index = _index(layout, task_type)
        os.environ["TF_CONFIG"] = tf_config(layout, task_type, index)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"jobsetpod: {exc}", file=sys.stderr)
        return 2
    if task_var:
        os.environ[task_var] = f"{task_type}:{index}"
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"jobsetpod: cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
