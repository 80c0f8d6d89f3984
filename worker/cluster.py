"""What this task is, from TF_CONFIG (no TensorFlow needed)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from launcher.contract import envnames


@dataclass(frozen=True)
class TaskInfo:
    type: str
    index: int
    cluster: dict

    @property
    def key(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def is_chief(self) -> bool:
        """The task that writes checkpoints and the final model: the chief, else worker 0."""
        if self.type == "chief":
            return True
        return self.type == "worker" and self.index == 0 and not self.cluster.get("chief")

    def keeps_own_backup(self, environ=None) -> bool:
        """Whether this task writes its backups where it restores from (its state dir) although
        it is not the chief: on private disks (``TFCLUSTER_STATE_PRIVATE``) every worker does,
        so that the newest backup survives the chief's host. On a shared state dir only the
        chief may write there."""
        env = os.environ if environ is None else environ
        return self.is_chief or env.get(envnames.STATE_PRIVATE) == "1"

    @property
    def num_workers(self) -> int:
        return len(self.cluster.get("chief", [])) + len(self.cluster.get("worker", []))


class ConfigError(Exception):
    pass


def task_from_env(environ=None) -> TaskInfo:
    env = os.environ if environ is None else environ
    raw = env.get("TF_CONFIG")
    if not raw:
        # Single-process run: one worker, no cluster.
        return TaskInfo("worker", 0, {})
    try:
        conf = json.loads(raw)
        task = conf.get("task") or {}
        return TaskInfo(str(task.get("type", "worker")), int(task.get("index", 0)), dict(conf.get("cluster") or {}))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"TF_CONFIG is not valid JSON with cluster/task: {exc}") from None
