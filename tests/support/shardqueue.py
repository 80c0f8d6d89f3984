"""The local tests shared out among pytests running at once (tests/run.sh), file by file, as each
pytest comes free: the one that claims a test file first runs all of it.

A fixed split of the local tests (every other file) left one half minutes behind the other, and
the labs' shards, whose tests mostly wait on hosts, idle at the end. With ``--queue DIR`` a
pytest first runs its own shard's tests (the labs', for a labs shard; none for ``--shard local``),
then takes the local test files in their collected order: each claimed by creating
``DIR/claims/<file>`` exclusively (O_EXCL: one pytest wins it), never run by another. A file's
tests run together, so module fixtures are set up once, as in one pytest.

Every pytest lists the files it could claim in ``DIR/files``; ``unclaimed(DIR)`` afterwards
names the files no pytest ran (all of them stopped first, e.g. ``-x``): tests/run.sh fails on any.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, Optional


def _name(path: str) -> str:
    return path.replace("/", "__")


def _claim(queue: Path, path: str) -> bool:
    try:
        fd = os.open(queue / "claims" / _name(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


def ordered(items: list, shared: Callable[[object], bool], queue: Path) -> Iterator:
    """``items`` this pytest runs, in order: its own (not ``shared``) first, then each shared
    file's items if this pytest claims the file, claimed only when it is about to be run."""
    (queue / "claims").mkdir(parents=True, exist_ok=True)
    own = [item for item in items if not shared(item)]
    files: dict[str, list] = {}
    for item in items:
        if shared(item):
            files.setdefault(_file_of(item), []).append(item)
    with open(queue / "files", "a") as f:  # (each pytest appends the same list: read as a set)
        f.write("".join(f"{path}\n" for path in files))
    yield from own
    for path, its_items in files.items():
        if _claim(queue, path):
            yield from its_items


def runtestloop(session, shared: Callable[[object], bool], queue: Path) -> bool:
    """pytest's own run loop (_pytest/main.py, pytest_runtestloop) over ``ordered``: each item's
    ``nextitem`` is the next one this pytest runs (so fixtures are torn down as they would be),
    found just before the item runs: a file is claimed while the one before it runs its last test."""
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} error{'s' if session.testsfailed != 1 else ''} during collection")
    if session.config.option.collectonly:
        return True
    run = ordered(session.items, shared, queue)
    item: Optional[object] = next(run, None)
    ran = set()
    while item is not None:
        nextitem = next(run, None)
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        ran.add(item.nodeid)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        item = nextitem
    elsewhere = [item for item in session.items if item.nodeid not in ran]
    if elsewhere:  # (run by another pytest: said as deselected in the summary)
        session.config.hook.pytest_deselected(items=elsewhere)
    return True


def unclaimed(queue: Path) -> list[str]:
    """The files some pytest could claim that none did."""
    try:
        files = set((queue / "files").read_text().split())
    except FileNotFoundError:
        return []
    claimed = {p.name for p in (queue / "claims").iterdir()} if (queue / "claims").is_dir() else set()
    return sorted(path for path in files if _name(path) not in claimed)


if __name__ == "__main__":  # python -m tests.support.shardqueue DIR: exit 1 naming what never ran
    import sys

    left = unclaimed(Path(sys.argv[1]))
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        print(f"tests/run.sh: {len(left)} test file(s) were run by no shard (each stopped first): {shown}", file=sys.stderr)
    sys.exit(1 if left else 0)
