"""Files opened as tfcluster means to, whatever was planted there (docs/concepts/trust.md).

Writing: ``write_whole`` creates a new file in the target's directory with an exclusive, no-follow
open (``tempfile.mkstemp``: a random name, ``O_CREAT | O_EXCL``, so a planted ``.NAME.tmp`` or a
symlink there is never opened) and renames it over the target; a rename replaces a symlink at the
target itself and never writes where it points. ``open_append`` opens a log or an event file for
appending without following a symlink.

Reading: ``read_regular`` (and ``open_regular`` for a reader that streams) opens without blocking
(a FIFO with no writer would hang an ordinary ``open``), checks that what it opened is a regular
file (a FIFO, a device such as ``/dev/zero``, a socket or a directory is ``NotRegular``, one line),
optionally refuses a symlink or a path whose real place leaves a directory, and reads at most a
bound. A leaf: it imports nothing of tfcluster.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Optional, Union


class UnsafeFile(OSError):
    """What was found at a path is not what tfcluster reads or writes there; ``str()`` is one line
    that says what it is (never its contents), to follow the path: ``PATH: {exc}``; ``strerror``
    is the same line (a caller that says ``cannot read PATH: {exc.strerror}`` reads it right)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)

    def __str__(self) -> str:
        return str(self.strerror)


class NotRegular(UnsafeFile):
    pass


class TooBig(UnsafeFile):
    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def kind_of(mode: int) -> str:
    """``a FIFO``, ``a character device``, ...: what a non-regular file is, for a message."""
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Union[str, Path], *, follow: bool = True, within: Optional[Path] = None) -> BinaryIO:
    """``path`` opened for reading, binary; NotRegular if it is not a regular file (it never blocks
    on a FIFO), UnsafeFile if ``follow`` is False and it is a symlink or its directory a symlink out
    of its own folder (``latest`` to a run beside it is fine), or if ``within`` is given and
    its real place is outside that directory (a symlink out of a run dir). OSError as ``open`` raises
    it otherwise (missing, no permission)."""
    path = Path(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    if not follow and is_symlink(path.parent) and not _sibling_link(path.parent):  # (a record's logs/ elsewhere)
        raise UnsafeFile(f"is in {path.parent.name}/, a symbolic link out of its folder; tfcluster does not read "
                         "through it here")
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and exc.errno == errno.ELOOP:  # ELOOP: the path is a symlink
            raise UnsafeFile("is a symbolic link; tfcluster does not read through it here") from None
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a socket, a device with no driver
            try:
                mode = os.stat(path).st_mode
            except OSError:
                raise exc from None
            raise NotRegular(f"is {kind_of(mode)}, not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"is {kind_of(st.st_mode)}, not a regular file")
        if within is not None:
            real, root = os.path.realpath(f"/proc/self/fd/{fd}"), os.path.realpath(within)
            if not (real == root or real.startswith(root.rstrip("/") + "/")):
                raise UnsafeFile(f"leads outside {within} (a symbolic link); tfcluster reads only what is inside")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _sibling_link(link: Path) -> bool:
    """True if the symlink ``link`` leads to a directory beside it (``runs/NAME/latest`` -> a run of
    the same folder), which stays inside what the reader was pointed at."""
    real = Path(os.path.realpath(link))
    return real.parent == Path(os.path.realpath(link.parent)) and real.is_dir()


def read_regular(path: Union[str, Path], limit: int, *, follow: bool = True,
                 within: Optional[Path] = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (TooBig past it, with the size it
    has); the checks of ``open_regular``."""
    with open_regular(path, follow=follow, within=within) as fh:
        data = fh.read(limit + 1)
        if len(data) > limit:
            size = max(os.fstat(fh.fileno()).st_size, len(data))
            raise TooBig(f"is {size:,} bytes, above the bound of {limit:,}", size)
    return data


def is_symlink(path: Union[str, Path]) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def write_whole(path: Union[str, Path], data: Union[str, bytes], mode: Optional[int] = None, fsync: bool = True) -> None:
    """Write ``path`` whole or not at all: a new file (exclusive, no-follow, random name) in its
    directory, renamed over ``path`` (which replaces a symlink there, never its target). A reader,
    or a crash, never sees it half-written. OSError if it cannot be written (nothing is left).
    ``mode``: exactly these bits whatever the umask (a run record's 0600); None: 0644 less the
    umask, as any tool's output file."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(fd, 0o644 & ~_umask() if mode is None else mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would change it for every thread
    for a moment)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def open_append(path: Union[str, Path], mode: Optional[int] = None) -> int:
    """A descriptor that appends to ``path`` (created if missing), never through a symlink.
    ``mode``: the file gets exactly these bits whatever the umask; None: a new file's 0644 less
    the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o644 if mode is None else mode)
    if mode is not None:
        try:
            os.fchmod(fd, mode)
        except OSError:
            pass  # (not this user's file: what it is stays as it was)
    return fd


# The modes of what a run writes (its record, its state dir), by the spec's ``share``: private to
# the user, or readable by the group on purpose. Explicit, never the umask's.
SHARE_MODES = {"private": (0o700, 0o600), "group": (0o750, 0o640)}


def share_modes(share: str) -> tuple[int, int]:
    """(dir mode, file mode) for the spec's ``share`` (private unless "group")."""
    return SHARE_MODES.get(share, SHARE_MODES["private"])


def file_mode_in(directory: Union[str, Path]) -> int:
    """The mode of a new file of a run in ``directory`` (a run dir made with ``share_modes``):
    0640 where the dir is readable by its group, else 0600."""
    try:
        return 0o640 if os.stat(directory).st_mode & 0o040 else 0o600
    except OSError:
        return 0o600


def make_dir(path: Union[str, Path], mode: int, own: bool = True) -> None:
    """``path`` and the dirs missing above it, each made with exactly ``mode`` whatever the umask.
    ``own``: an existing ``path`` gets ``mode`` too (it is tfcluster's, e.g. a run's state dir)."""
    path = Path(path)
    if not path.parent.is_dir() and path.parent != path:
        make_dir(path.parent, mode, own=False)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if own and os.stat(path).st_uid == os.geteuid():  # (root's own dir above stays root's)
            os.chmod(path, mode)
        return
    os.chmod(path, mode)


def dir_within(root: Union[str, Path], path: Union[str, Path], mode: int = 0o700) -> Path:
    """``path`` (under ``root``) as a directory of this user's, each missing one from ``root`` down
    made with ``mode``: every component below ``root`` is a real directory (not a symlink: one
    planted in a run's record would send what tfcluster writes, and the files it removes, into
    another directory) owned by this user. Raises OSError (ELOOP/EPERM) when one is not."""
    root, path = Path(root), Path(path)
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        try:
            os.mkdir(here, mode)
        except FileExistsError:
            pass
        info = os.lstat(here)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ELOOP, f"not a directory of tfcluster's (a {kind_of(info.st_mode)})", str(here))
        if info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "owned by another user", str(here))
    return path
