"""tests/support/mutants.py's mutants still apply: each edit's text occurs exactly once in the
file it names, so the mutation check (``python -m tests.support.mutants``) mutates what it says,
and a change of launcher/ that moves a mutated line says so here, not at the next check."""

from __future__ import annotations

import pytest

from tests.support.mutants import MUTANTS, ROOT


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_edits_one_place_of_launcher_that_exists(mutant):
    assert mutant.path.startswith("launcher/"), mutant.path
    text = (ROOT / mutant.path).read_text()
    assert text.count(mutant.old) == 1, (f"{mutant.name}: {mutant.path} holds its text {text.count(mutant.old)} "
                                         "times: point the mutant at the line as it is now")
    assert mutant.new != mutant.old
    for test in mutant.tests + mutant.standin:
        if not test.startswith("-") and "/" in test:
            assert (ROOT / test.split("::", 1)[0]).exists(), test


def test_mutant_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
