"""pathtrust.unsafe, StrictModes' rule, on real dirs: every dir from / down owned by the user or
root and writable by no one else, a sticky dir's entry the user's own; a symlink judged by its
owner and where it leads. Other owners are made with chown (root)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.remote import pathtrust_command_source
from launcher.remote.pathtrust import unsafe

OTHER = 54321  # a uid no one has: shown as "uid 54321"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def top(tmp_path):
    tmp_path.chmod(0o755)
    return tmp_path


def test_a_private_tree_is_safe_and_a_missing_tail_is_left_to_the_caller(top):
    (top / "a" / "b").mkdir(parents=True)
    assert unsafe(top / "a" / "b") is None
    assert unsafe(top / "a" / "b" / "not" / "yet") is None


def test_writable_by_others_or_the_group_is_named_with_its_mode(top):
    (top / "open" / "x").mkdir(parents=True)
    (top / "open").chmod(0o777)
    assert unsafe(top / "open" / "x") == f"{top}/open is writable by others (mode 0777, owner root)"
    (top / "open").chmod(0o775)
    assert unsafe(top / "open" / "x") == f"{top}/open is writable by its group (mode 0775, owner root)"
    (top / "open").chmod(0o755)
    (top / "open" / "x").chmod(0o1777)  # the leaf itself: sticky does not make it the run's own
    assert unsafe(top / "open" / "x") == f"{top}/open/x is writable by others (mode 1777, owner root)"


@needs_root
def test_a_sticky_dir_is_fine_when_the_entry_under_it_is_the_users(top):
    sticky = top / "sticky"
    (sticky / "mine" / "run").mkdir(parents=True)
    sticky.chmod(0o1777)
    assert unsafe(sticky / "mine" / "run") is None
    (sticky / "theirs").mkdir()
    os.chown(sticky / "theirs", OTHER, OTHER)
    assert unsafe(sticky / "theirs" / "run") == f"{sticky}/theirs is owned by uid {OTHER}, not by you or root (mode 0755)"
    # As that user, the same entry is theirs: safe for them.
    assert unsafe(sticky / "theirs", uid=OTHER) is None


@needs_root
def test_a_symlink_is_judged_by_its_owner_and_by_where_it_leads(top):
    (top / "real").mkdir()
    (top / "link").symlink_to(top / "real")
    assert unsafe(top / "link") is None
    os.lchown(top / "link", OTHER, OTHER)
    assert unsafe(top / "link") == f"{top}/link is owned by uid {OTHER}, not by you or root (mode 0777)"
    os.lchown(top / "link", 0, 0)
    (top / "real").chmod(0o777)
    assert unsafe(top / "link") == f"{top}/real is writable by others (mode 0777, owner root)"


@needs_root
def test_the_files_code_is_run_from_are_checked_too(top):
    (top / "run").mkdir()
    (top / "run" / "boot.py").write_text("pass\n")
    assert unsafe(top / "run", files=("boot.py",)) is None
    os.chown(top / "run" / "boot.py", OTHER, OTHER)
    assert unsafe(top / "run", files=("boot.py",)) == f"{top}/run/boot.py is owned by uid {OTHER}, not by you or root"
    assert unsafe(top / "run", files=("gone.py",)) == f"{top}/run/gone.py cannot be examined (No such file or directory)"


def test_the_command_a_restart_runs_first_exits_2_with_one_line(top):
    (top / "open" / "run").mkdir(parents=True)
    check = [sys.executable, "-S", "-c", pathtrust_command_source()]
    assert subprocess.run([*check, str(top / "open" / "run")], timeout=30).returncode == 0
    (top / "open").chmod(0o777)
    res = subprocess.run([*check, str(top / "open" / "run")], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert res.stderr.startswith(f"tfcluster: refusing {top}/open/run: {top}/open is writable by others (mode 0777, "
                                 "owner root); fix: ") and len(res.stderr.splitlines()) == 1


@needs_root
def test_the_leaf_may_be_owned_by_the_user_it_was_given_to_and_nothing_above_it(top):
    """docker as root gives the run's dirs to the containers' uid: the run trusts that owner for
    those dirs themselves, never for a dir above them."""
    (top / "given" / "state").mkdir(parents=True)
    os.chown(top / "given" / "state", OTHER, OTHER)
    assert unsafe(top / "given" / "state", leaf_owner=OTHER) is None
    assert unsafe(top / "given" / "state").startswith(f"{top}/given/state is owned by uid {OTHER}")
    os.chown(top / "given", OTHER, OTHER)
    assert unsafe(top / "given" / "state", leaf_owner=OTHER).startswith(f"{top}/given is owned by uid {OTHER}")


# ------------------------------------------------------------------ `..` after a symlink
#
# The kernel resolves ``a/link/../b`` by following ``link`` first, then going up from where it led;
# ``os.path.abspath`` drops ``link/..`` as text. The check walks as the kernel does: the dirs another
# user owns here (a 0777 scratch dir, a sticky one) are what the path really reaches.


@pytest.fixture
def scratch(top):
    """``top/proj`` (the user's, 0755) beside ``top/open`` (0777, another uid's: a scratch dir
    anyone can write) holding ``sub``, and ``proj/examples`` a symlink to ``open/sub``."""
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    (top / "proj").mkdir()
    (top / "open" / "sub").mkdir(parents=True)
    (top / "open").chmod(0o777)
    os.chown(top / "open", OTHER, OTHER)
    (top / "proj" / "examples").symlink_to(top / "open" / "sub")
    return top


def test_dotdot_after_a_symlink_goes_up_from_where_the_link_leads(scratch, monkeypatch):
    problem = f"{scratch}/open is owned by uid {OTHER}, not by you or root (mode 0777)"
    assert os.path.abspath(f"{scratch}/proj/examples/../runs") == f"{scratch}/proj/runs"  # (what it was judged as)
    assert unsafe(f"{scratch}/proj/examples/../runs") == problem
    assert unsafe(scratch / "proj" / "examples" / ".." / "runs" / "r1") == problem
    monkeypatch.chdir(scratch / "proj")
    assert unsafe("examples/../runs") == problem  # (relative: from the current dir, the same walk)
    assert unsafe("./examples/./../runs") == problem
    # The same path without the link is the user's own: safe.
    assert unsafe(f"{scratch}/proj/real/../runs") is None
    assert unsafe("runs") is None


def test_a_dir_passed_through_on_the_way_counts_even_if_the_path_ends_in_a_safe_one(scratch):
    """``examples/../../proj/runs`` ends in the user's own dir, but goes through the 0777 dir on
    the way: its owner could swap ``sub`` for a link that makes the same text end elsewhere."""
    (scratch / "proj" / "runs").mkdir()
    path = f"{scratch}/proj/examples/../../proj/runs"
    assert os.path.realpath(path) == f"{scratch}/proj/runs"  # (where it leads now: the user's own)
    assert unsafe(path) == f"{scratch}/open is owned by uid {OTHER}, not by you or root (mode 0777)"
    os.chown(scratch / "open", 0, 0)  # (root's scratch dir: its mode is what is wrong)
    assert unsafe(path) == f"{scratch}/open is writable by others (mode 0777, owner root)"


def test_a_path_that_ends_at_a_sticky_dir_by_dotdot_is_judged_as_the_leaf(top):
    """``link/..`` with ``link`` to the user's entry in a sticky dir ends at the sticky dir itself:
    the leaf, which others can write in (a sticky dir is fine only above the user's own entry)."""
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    sticky = top / "sticky"
    (sticky / "mine").mkdir(parents=True)
    sticky.chmod(0o1777)
    os.chown(sticky, OTHER, OTHER)
    (top / "proj").mkdir()
    (top / "proj" / "link").symlink_to(sticky / "mine")
    assert unsafe(top / "proj" / "link") == f"{sticky} is owned by uid {OTHER}, not by you or root (mode 1777)"
    os.chown(sticky, 0, 0)
    assert unsafe(top / "proj" / "link") is None  # (root's sticky dir, the user's entry: fine)
    assert unsafe(f"{top}/proj/link/..") == f"{sticky} is writable by others (mode 1777, owner root)"
    assert unsafe(f"{top}/proj/link/../mine") is None


def test_dotdot_past_the_root_and_relative_link_targets_resolve_as_the_kernel_does(top):
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "rel").symlink_to("b/../b")  # (relative: from the link's own dir)
    (top / "open").mkdir()
    (top / "open").chmod(0o777)
    assert unsafe(top / "a" / "rel") is None
    assert unsafe("/../../" + str(top).lstrip("/") + "/a/rel") is None
    (top / "a" / "up").symlink_to("../open")
    assert unsafe(top / "a" / "up") == f"{top}/open is writable by others (mode 0777, owner root)"
    # Through `up` into `open`, then up again to top/a/b: a dir anyone can write is on the way,
    # which the walk never passes (whatever is in it, or done to it, could lead elsewhere).
    assert unsafe(f"{top}/a/up/../a/b") == f"{top}/open is writable by others (mode 0777, owner root)"
    assert unsafe(f"{top}/a/rel/../b") is None


def test_a_loop_of_symlinks_is_one_line(top):
    (top / "x").symlink_to(top / "y")
    (top / "y").symlink_to(top / "x")
    problem = unsafe(top / "x" / "run")
    assert problem == f"{top}/x/run: more than 40 symbolic links on the way"


def test_the_shipped_check_walks_as_the_kernel_does(scratch):
    """The text a restart runs first on a host (stdlib, ``python -S``) judges the same path."""
    check = [sys.executable, "-S", "-c", pathtrust_command_source(), f"{scratch}/proj/examples/../runs"]
    res = subprocess.run(check, capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and f"{scratch}/open is owned by uid {OTHER}" in res.stderr, res.stderr
    assert len(res.stderr.splitlines()) == 1
