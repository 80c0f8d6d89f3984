"""A compact plan JSON (``Plan.to_compact_json``: ``plan --json=compact`` and the record's
plan.json) expanded into the full shape (``Plan.to_json``: ``plan --json``), so tests can show
that the compact shape holds everything the full one says."""

from __future__ import annotations

import json
from typing import Any, Mapping

from launcher.contract import envnames
from launcher.plan.model import COMPACT


def expand_plan_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plan JSON in the full shape (every task with ``tf_config``, ``command`` and ``env``),
    from either shape: a compact one is expanded, a full one comes back as it is."""
    if COMPACT not in (data.get("format"), data.get("shape")):  # (shape: `plan --json=compact`'s own output)
        return dict(data)
    cluster, command, env = data.get("cluster"), data.get("command", []), data.get("env", {})
    tasks = []
    for row in data.get("tasks", []):
        own = {"type": row["type"], "index": row["index"]}
        tf_config = {"cluster": cluster, "task": own} if cluster is not None else {"task": own}
        task_env = {**row.get("env", env), **row.get("env_extra", {}),
                    "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
                    envnames.TASK: f"{row['type']}:{row['index']}"}
        for name in row.get("env_drop", ()):
            task_env.pop(name, None)
        tasks.append({**{k: row[k] for k in ("type", "index", "host", "address", "port") if k in row},
                      "tf_config": tf_config, "command": row.get("command", command),
                      "env": dict(sorted(task_env.items()))})
    head = {k: v for k, v in data.items() if k not in ("format", "shape", "cluster", "command", "env", "tasks")}
    return {**head, "tasks": tasks}
