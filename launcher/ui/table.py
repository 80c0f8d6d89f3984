"""The one plain-text table renderer: ``plan``/``up --dry-run``'s task table, ``status``'s and
``runs``' tables and the final report all go through ``render``. Plain text (no escape codes on
any output: colours belong to the live panel, which draws its rich Table from the same column
declarations, launcher/ui/columns.py). Widths are terminal cells (``rich.cells.cell_len``: a wide
character counts two), so rows stay aligned whatever a host or a line holds.
"""

from __future__ import annotations

from typing import Container, Optional, Sequence

from rich.cells import cell_len

MISSING = "-"  # a cell with no value (None)


def render(headers: Optional[Sequence[str]], rows: Sequence[Sequence[Optional[str]]], right: Container[int] = (),
           indent: str = "  ", gap: str = "  ") -> list[str]:
    """The header line (none for ``headers`` None) and one line per row: columns ``gap`` apart, left-aligned unless their index
    is in ``right``, each line starting with ``indent`` and without trailing blanks (so a last
    left-aligned column such as a command or a task's last line is never padded). A None cell is
    shown as MISSING."""
    table = ([list(headers)] if headers is not None else []) + [[MISSING if c is None else c for c in row]
                                                                 for row in rows]
    if not table:
        return []
    count = len(table[0])
    widths = [max(cell_len(r[i]) for r in table) for i in range(count)]
    out = []
    for r in table:
        cells = []
        for i, c in enumerate(r):
            pad = " " * (widths[i] - cell_len(c))
            cells.append(pad + c if i in right else c + pad)
        out.append((indent + gap.join(cells)).rstrip())
    return out
