"""JSON as tfcluster prints it (``status --json``, ``runs --json``, ``plan --json``, ``compare``'s
results.json): strict JSON, which other programs' parsers read. Python's ``json`` writes NaN and
Infinity, which are not JSON; a figure that is not finite (a training's ``loss=nan``) is printed
as ``null`` (not known), and a run record holding one where tfcluster writes times is damaged
before it gets here (launcher/record/events.py)."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (lists, tuples and dicts
    through)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


def json_text(value: Any, indent: int = 2, default: Any = None) -> str:
    """``value`` as strict JSON (``allow_nan=False``: never ``NaN``; see ``finite``)."""
    return json.dumps(finite(value), indent=indent, allow_nan=False, default=default)
