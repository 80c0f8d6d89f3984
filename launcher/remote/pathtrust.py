"""Whether another user could swap a path: OpenSSH's StrictModes rule, for the dirs a run keeps
its code, its records and its checkpoints in (docs/concepts/trust.md, "Paths no one else can swap").

A path is safe for user UID when each of its components, from ``/`` down, is owned by UID or root
and is not writable by its group or others, except a sticky dir (``/tmp``: 1777), whose entries
only their owners may rename, so the entry under it must be UID's or root's. The components are
judged in the order the kernel resolves them: a symlink on the way is judged by its owner, then
what it holds is walked in its place by the same rule, and a ``..`` goes up from where the walk
has got to (from the dir a symlink led to, not from the link's name: ``examples/../runs`` with
``examples`` a link into a dir anyone can write ends up there). A component that does not exist
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


# The most symlinks one walk follows (the kernel's own bound, MAXSYMLINKS, is 40).
MAX_LINKS = 40


def absolute(path):
    """``path`` made absolute (under the current dir) without changing what it names: empty and
    ``.`` components dropped, ``..`` kept. (``os.path.abspath`` drops ``dir/..`` as text; the kernel
    goes up from where ``dir`` leads, which is elsewhere when ``dir`` is a symlink.)"""
    path = os.fspath(path)
    if not path.startswith("/"):
        path = os.getcwd() + "/" + path
    return "/" + "/".join(p for p in path.split("/") if p not in ("", "."))


def resolved(path):
    """``absolute(path)``, or where it holds a ``..``, where the kernel takes it: its real path
    (``os.path.realpath`` resolves each symlink before the ``..`` after it). What is made, written
    and imported there goes by this: code that makes a path absolute as text (``abspath``,
    ``tempfile``) must not land elsewhere than the dir that was checked. Check the path as given
    (``unsafe``: every dir the kernel passes on its way), then use this."""
    path = absolute(path)
    return os.path.realpath(path) if ".." in path.split("/") else path


def _judge(p, st, uid, last, leaf_owner):
    """The problem with the component ``p`` (its lstat ``st``) on the way, or None; ``last``: it is
    the path itself (the leaf), which may be ``leaf_owner``'s and must not be writable even if sticky."""
    owners = (uid, 0, leaf_owner) if last and leaf_owner is not None else (uid, 0)
    if st.st_uid not in owners:
        return "%s is owned by %s, not by you or root (mode %04o)" % (p, _owner(st.st_uid), stat.S_IMODE(st.st_mode))
    if stat.S_ISLNK(st.st_mode):
        return None  # its owner is trusted, and where it leads is walked next
    if st.st_mode & 0o022 and (last or not stat.S_ISDIR(st.st_mode) or not st.st_mode & stat.S_ISVTX):
        who = "others" if st.st_mode & 0o002 else "its group"
        return "%s is writable by %s (mode %04o, owner %s)" % (p, who, stat.S_IMODE(st.st_mode), _owner(st.st_uid))
    return None


def _walk(path, uid, leaf_files=(), leaf_owner=None):
    """Each component of the absolute ``path`` judged in the order the kernel resolves it: ``/``,
    then name after name; a symlink judged itself, then what it holds walked in its place (from
    ``/`` if absolute); ``..`` goes up from the dir reached so far, never from the text before it.
    The dir it ends at is judged as the leaf. A component that does not exist ends the walk."""
    names = [p for p in path.split("/") if p]
    done = []  # the dirs reached, each judged on the way
    judged_last = None
    links = 0
    problem = _judge("/", os.lstat("/"), uid, not names, leaf_owner)
    while names and not problem:
        name = names.pop(0)
        if name in (".", ".."):
            if name == ".." and done:
                done.pop()
            continue
        p = "/" + "/".join(done + [name])
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            return None  # made by the caller, then checked again (under a file: its making fails, said as such)
        except OSError as exc:
            return "%s cannot be examined (%s)" % (p, exc.strerror)
        last = all(n == "." for n in names)
        problem = _judge(p, st, uid, last, leaf_owner)
        if stat.S_ISLNK(st.st_mode) and not problem:
            links += 1
            if links > MAX_LINKS:
                return "%s: more than %d symbolic links on the way" % (path, MAX_LINKS)
            target = os.readlink(p)
            if target.startswith("/"):
                done = []
            names = [n for n in target.split("/") if n] + names
            continue
        done.append(name)
        judged_last = p if last else None
    if problem:
        return problem
    end = "/" + "/".join(done)
    if judged_last != end:  # (it ended on a `..`: the dir it leads to is the leaf)
        try:
            problem = _judge(end, os.lstat(end), uid, True, leaf_owner)
        except OSError as exc:
            return "%s cannot be examined (%s)" % (end, exc.strerror)
        if problem:
            return problem
    for name in leaf_files:
        problem = _file(os.path.join(end, name), uid)
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
    return _walk(absolute(path), uid, files, leaf_owner)


def main(argv):
    """``python -S pathtrust.py DIR [FILE...]`` (the ssh backend runs this text with ``-c`` before a
    restart's ``boot.py``): exit 0 if DIR and its FILEs are safe, else one line and exit 2."""
    import sys

    problem = unsafe(argv[0], files=argv[1:]) if argv else "no path given"
    if problem:
        sys.stderr.write("tfcluster: refusing %s: %s; fix: %s\n" % (argv[0] if argv else "", problem, SAFE_FIX))
        return 2
    return 0
