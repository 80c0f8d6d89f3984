"""Whether another user could swap a path: OpenSSH's StrictModes rule, for the dirs a run keeps
its code, its records and its checkpoints in (docs/concepts/trust.md, "Paths no one else can swap").

A path is safe for user UID when each of its components, from ``/`` down, is owned by UID or root
and is not writable by its group or others, except a sticky dir (``/tmp``: 1777), whose entries
only their owners may rename, so the entry under it must be UID's or root's. A symlink on the way
is judged by its owner, and the dir it leads to by the same rule. A component that does not exist
yet ends the walk: the caller creates it, then asks again.

Only the owner of a dir (UID or root, here) can change its mode or owner, so a path found safe
stays safe: a check just before code in it is run or imported closes the window between the
preflight and the start.

Stdlib only, Python 3.6+: the host agent (agent.py) is sent with this text ahead of its own
(``launcher.remote.agent_source``); the launcher imports it for its own dirs.
"""

import os
import stat

# What a problem line suggests (the caller adds the spec key that named the path).
SAFE_FIX = ("use a dir that only you (and root) can write, or make every dir above it owned by you or root "
            "and not writable by group or others (chmod go-w), or sticky (chmod +t) with the entry under it yours")


def _owner(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "uid %d" % uid


def _chain(path):
    """``/``, then each prefix of the absolute ``path``, down to ``path`` itself."""
    parts = [p for p in path.split("/") if p]
    return ["/"] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def _walk(path, uid, leaf_files=(), leaf_owner=None):
    chain = _chain(path)
    for i, p in enumerate(chain):
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            return None  # made by the caller, then checked again (under a file: its making fails, said as such)
        except OSError as exc:
            return "%s cannot be examined (%s)" % (p, exc.strerror)
        owners = (uid, 0, leaf_owner) if i == len(chain) - 1 and leaf_owner is not None else (uid, 0)
        if st.st_uid not in owners:
            return "%s is owned by %s, not by you or root (mode %04o)" % (p, _owner(st.st_uid), stat.S_IMODE(st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            continue  # its owner is trusted, and where it leads is walked on its own (``unsafe``)
        last = i == len(chain) - 1
        writable = st.st_mode & 0o022
        if writable and (last or not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_ISVTX):
            who = "others" if st.st_mode & 0o002 else "its group"
            return "%s is writable by %s (mode %04o, owner %s)" % (p, who, stat.S_IMODE(st.st_mode), _owner(st.st_uid))
    for name in leaf_files:
        problem = _file(os.path.join(path, name), uid)
        if problem:
            return problem
    return None


def _file(path, uid):
    try:
        st = os.lstat(path)
    except OSError as exc:
        return "%s cannot be examined (%s)" % (path, exc.strerror)
    if not stat.S_ISREG(st.st_mode):
        return "%s is not a regular file" % path
    if st.st_uid not in (uid, 0):
        return "%s is owned by %s, not by you or root" % (path, _owner(st.st_uid))
    if st.st_mode & 0o022:
        return "%s is writable by others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def unsafe(path, uid=None, files=(), leaf_owner=None):
    """None if no user but ``uid`` (default: this process's) and root can swap ``path`` or any
    dir above it (nor the regular ``files`` in it, if given), else the one line that says which
    component is not and why (``/scratch/tfc is writable by others (mode 0777, owner bob)``).
    ``leaf_owner``: a uid ``path`` itself may be owned by too (a container's user it was given to)."""
    uid = os.geteuid() if uid is None else uid
    path = os.path.abspath(path)
    problem = _walk(path, uid, files, leaf_owner)
    if problem:
        return problem
    real = os.path.realpath(path)
    if real != path:
        return _walk(real, uid, files, leaf_owner)
    return None


def main(argv):
    """``python -S pathtrust.py DIR [FILE...]`` (the ssh backend runs this text with ``-c`` before a
    restart's ``boot.py``): exit 0 if DIR and its FILEs are safe, else one line and exit 2."""
    import sys

    problem = unsafe(argv[0], files=argv[1:]) if argv else "no path given"
    if problem:
        sys.stderr.write("tfcluster: refusing %s: %s; fix: %s\n" % (argv[0] if argv else "", problem, SAFE_FIX))
        return 2
    return 0
