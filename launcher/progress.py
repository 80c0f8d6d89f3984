"""The progress-line format: the one place the launcher reads what tasks print about training.

A task (``python -m worker`` or a user's own script) prints lines of the form::

    tfcluster-<kind> key=value key=value ...

for example ``tfcluster-epoch epoch=2 epochs=3 loss=0.4123 accuracy=0.8810``. Values carry no
spaces. Anything else on a task's output is ordinary output. The live view, the final report,
``tfcluster compare`` and ``tfcluster status`` all read progress through ``parse``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

PREFIX = "tfcluster-"


@dataclass(frozen=True)
class Progress:
    kind: str  # "start", "step", "epoch", "result", "eval", ...
    fields: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.fields.get(name, default)

    def number(self, name: str) -> Optional[float]:
        """The field as a finite float, or None when absent or not a number."""
        raw = self.fields.get(name)
        if raw is None:
            return None
        try:
            value = float(raw.rstrip("s"))
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def integer(self, name: str) -> Optional[int]:
        value = self.number(name)
        return int(value) if value is not None else None


def parse(line: str) -> Optional[Progress]:
    """The progress record in ``line``, or None if it is not a progress line."""
    text = line.strip()
    if not text.startswith(PREFIX):
        return None
    head, _, rest = text.partition(" ")
    kind = head[len(PREFIX):]
    if not kind or not all(c.isalnum() or c == "_" for c in kind):
        return None
    fields: dict[str, str] = {}
    for token in rest.split():
        key, sep, value = token.partition("=")
        if sep and key:
            fields[key] = value
    return Progress(kind, fields)


def format_line(kind: str, **fields) -> str:
    """The line ``parse`` reads back (used by the worker's ``emit`` and by tests)."""
    parts = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{PREFIX}{kind} {parts}".rstrip()
