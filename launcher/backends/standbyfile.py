"""What the backends that keep warm standbys on this machine share (local, docker): the
promotion file a standby reads when promoted, and this machine's available memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping, Optional


def mem_available() -> Optional[int]:
    """This machine's MemAvailable in bytes (/proc/meminfo), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def write_promotion(path: Path, env: Mapping[str, str]) -> None:
    """A standby's promotion file, whole or not at all (mode 0600: it may hold secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(env), fh)
    os.replace(tmp, path)
