"""What the backends that keep warm standbys on this machine share (local, docker): the
promotion file a standby reads when promoted, and this machine's available memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Optional

from launcher.safefile import write_whole


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
    write_whole(path, json.dumps(dict(env)), mode=0o600)  # (exclusive, no-follow: launcher/safefile.py)
