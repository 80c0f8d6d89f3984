"""A unix socket only this user can reach: the one bind of a host's fork server (zygote.py), as its
starters make it (the local backend: launcher/backends/zygotes.py; the ssh host agent:
zygotehost.py) and zygote.py itself without ``--listen-fd``. Stdlib only, Python 3.6+, shipped
beside zygote.py (launcher/remote/__init__.py TASK_FILES), imported with ``sibling``; the
launcher imports it as ``launcher.remote.privsock``.

The socket's dir must be a real dir (not a symlink) of this user's own that no one else can enter
(mode 0700, as ``private_dir`` makes it): then no one else can plant or swap anything in it, and
the socket (bound under umask 077: no bit for group or others) is reached by this user alone. What is at the path
already is replaced only where it is this user's own socket (a server that ended); a symlink, a
file, a FIFO or another user's socket there is refused, in one line that names the path."""

import os
import socket
import stat
import tempfile


class NotPrivate(OSError):
    """The socket's path or its dir is not this user's alone: the one line says which and why."""


def private_dir(prefix="tfcluster-zygote-"):
    """A new dir of this user's own, mode 0700, in the system's temp dir (a unix socket's path is
    at most 107 bytes, so not under a deep run dir)."""
    return tempfile.mkdtemp(prefix=prefix)


def earlier(path, prefix="tfcluster-zygote-", name="z.sock"):
    """``path`` where it names a socket ``private_dir`` made (NAME in a PREFIX dir of the system's
    temp dir that is still there: an earlier server's, whose keeper ended), else None. Whose dir
    it is, bind_private checks."""
    if not isinstance(path, str) or not os.path.isabs(path) or os.path.basename(path) != name:
        return None
    folder = os.path.dirname(path)
    if os.path.dirname(folder) != tempfile.gettempdir() or not os.path.basename(folder).startswith(prefix):
        return None
    return path if os.path.isdir(folder) and not os.path.islink(folder) else None


def _owner(uid):
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "uid %d" % uid


def check_dir(path):
    """None where ``path`` (a socket's dir) is a real dir of this user's own that no one else can
    enter, else the one line that says why not."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return "%s: %s" % (path, exc.strerror)
    if stat.S_ISLNK(st.st_mode):
        return "%s is a symlink, not a dir of this user's own" % path
    if not stat.S_ISDIR(st.st_mode):
        return "%s is not a dir" % path
    if st.st_uid != os.geteuid():
        return "%s is owned by %s, not by this user" % (path, _owner(st.st_uid))
    if st.st_mode & 0o077:
        return "%s can be entered by others (mode %04o; it must be 0700)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _clear(path):
    """The path made free: this user's own stale socket removed; anything else there refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise NotPrivate("%s is a symlink; refusing to bind a socket there" % path)
    if not stat.S_ISSOCK(st.st_mode):
        raise NotPrivate("%s is there already and is not a socket; refusing to replace it" % path)
    if st.st_uid != os.geteuid():
        raise NotPrivate("%s is a socket of %s's, not this user's; refusing to replace it" % (path, _owner(st.st_uid)))
    os.unlink(path)


def bind_private(path, backlog=128):
    """A unix socket listening at ``path`` (bound under umask 077: its owner's alone) in a dir only this
    user can enter; a stale socket of this user's there (a server that ended) replaced. Raises
    ``NotPrivate`` (one line naming the path) where the dir or what is at the path is not this
    user's alone, OSError where the bind fails."""
    problem = check_dir(os.path.dirname(path) or ".")
    if problem:
        raise NotPrivate("cannot bind %s: %s" % (path, problem))
    _clear(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    try:
        listener.bind(path)
        listener.listen(backlog)
    except OSError:
        listener.close()
        raise
    finally:
        os.umask(old)
    return listener
