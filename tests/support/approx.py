"""Numbers of nested data, for ``pytest.approx``."""

from __future__ import annotations


def flat(rows) -> list:
    """The numbers of a list of tuples, in order: what ``pytest.approx`` compares (pytest 9.2
    refuses nested data structures, so ``flat(a) == approx(flat(b))`` instead of ``a == approx(b)``)."""
    return [x for row in rows for x in row]
