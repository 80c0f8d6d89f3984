"""Copy checkpoints between hosts' state dirs as a tar stream (``state.sync: copy``, ``state.fetch``).

Run by the ssh backend as ``python3 -S -c <this source> MODE STATE_DIR AREA...`` on a channel of
the connection it already holds (no second login), and imported by the launcher for fetching
(stdlib only, Python 3.6+).

* ``pack``: write an uncompressed tar of the AREAs of STATE_DIR to stdout, then one JSON line
  ``{"size": N, "sha256": HEX, "files": K}`` (the digest of exactly those bytes) to stderr. An
  area ``--latest:DIR`` (a resume area: ``backup``, ``checkpoints/custom``) holds only the latest
  complete checkpoint of every directory under it that has a ``checkpoint`` state file: that
  file and its prefix's ``.index`` and ``.data-*`` files (TensorFlow renames each into place
  before it updates the state file, so the prefix it names is complete). Any other area is
  copied whole. A missing area is simply absent from the tar.
* ``unpack``: read frames from stdin (4-byte big-endian length + data; a 0 length ends the
  data, then the sender's JSON line), extract into a fresh temp dir inside STATE_DIR, and
  compare size and sha256 with the sender's line. Only if they match is each AREA replaced
  (rename into place; an area absent from the tar is removed, so no stale state survives).
  Anything else -- a short stream, a digest mismatch, a full disk -- removes the temp dir and
  leaves STATE_DIR as it was: a partial copy is never used. Prints one JSON line:
  ``{"ok": true, "size": N}`` or ``{"error": TEXT}`` (exit 1).
"""

import hashlib
import json
import os
import shutil
import struct
import sys
import tarfile

LATEST = "--latest:"
TMP_PREFIX = ".tfcluster-incoming-"
OLD_PREFIX = ".tfcluster-old-"


def _latest_files(directory):
    """The state file and the latest checkpoint's files of ``directory``, or []."""
    state = os.path.join(directory, "checkpoint")
    try:
        with open(state) as fh:
            text = fh.read()
    except OSError:
        return []
    prefix = None
    for line in text.splitlines():
        if line.startswith("model_checkpoint_path:"):
            prefix = os.path.basename(line.split(":", 1)[1].strip().strip('"'))
    if not prefix:
        return []
    names = [n for n in os.listdir(directory) if n == prefix + ".index" or n.startswith(prefix + ".data-")]
    if prefix + ".index" not in names:
        return []
    return ["checkpoint"] + sorted(names)


def selection(state_dir, areas):
    """[(path relative to state_dir)] of the files and dirs to pack."""
    out = []
    for area in areas:
        latest = area.startswith(LATEST)
        rel = area[len(LATEST):] if latest else area
        root = os.path.join(state_dir, rel)
        if not os.path.isdir(root):
            continue
        if not latest:
            out.append(rel)
            continue
        for dirpath, dirnames, _ in os.walk(root):
            dirnames.sort()
            for name in _latest_files(dirpath):
                out.append(os.path.relpath(os.path.join(dirpath, name), state_dir))
    return out


class _HashingWriter:
    def __init__(self, raw):
        self.raw, self.size, self.sha = raw, 0, hashlib.sha256()

    def write(self, data):
        self.raw.write(data)
        self.size += len(data)
        self.sha.update(data)
        return len(data)

    def flush(self):
        self.raw.flush()


def pack(state_dir, areas, out):
    """Write the tar to ``out``; returns {"size", "sha256", "files"}."""
    writer = _HashingWriter(out)
    files = 0
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel in selection(state_dir, areas):
            tar.add(os.path.join(state_dir, rel), arcname=rel)
            files += 1
    writer.flush()
    return {"size": writer.size, "sha256": writer.sha.hexdigest(), "files": files}


class HashingReader:
    """A file-like ``read(n)`` over ``chunk()`` (next bytes, b"" at the end) that counts and hashes."""

    def __init__(self, chunk):
        self.chunk, self.buf, self.size, self.sha, self.eof = chunk, b"", 0, hashlib.sha256(), False

    def read(self, n=-1):
        while not self.eof and (n < 0 or len(self.buf) < n):
            data = self.chunk()
            if not data:
                self.eof = True
                break
            self.size += len(data)
            self.sha.update(data)
            self.buf += data
        if n < 0:
            n = len(self.buf)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def drain(self):
        while self.read(1 << 16):
            pass

    def matches(self, sender):
        """None if this stream is what the sender wrote, else why not."""
        if sender.get("size") != self.size:
            return "got %d of %s bytes" % (self.size, sender.get("size"))
        if sender.get("sha256") != self.sha.hexdigest():
            return "sha256 mismatch"
        return None


def _safe_members(tar):
    for member in tar:
        name = member.name
        if name.startswith("/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
            raise ValueError("refusing tar member %r" % name)
        yield member


_FILTER = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def extract(reader, state_dir):
    """Extract the tar read from ``reader`` into a new temp dir inside ``state_dir``; its path."""
    os.makedirs(state_dir, exist_ok=True)
    tmp = os.path.join(state_dir, "%s%d" % (TMP_PREFIX, os.getpid()))
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in _safe_members(tar):
                tar.extract(member, tmp, **_FILTER)
        reader.drain()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def commit(tmp, state_dir, areas):
    """Replace each area of ``state_dir`` by its copy in ``tmp`` (or remove it if absent there)."""
    old = os.path.join(state_dir, "%s%d" % (OLD_PREFIX, os.getpid()))
    shutil.rmtree(old, ignore_errors=True)
    os.makedirs(old)
    for i, area in enumerate(areas):
        rel = area[len(LATEST):] if area.startswith(LATEST) else area
        dst, src = os.path.join(state_dir, rel), os.path.join(tmp, rel)
        if os.path.lexists(dst):
            os.rename(dst, os.path.join(old, str(i)))
        if os.path.lexists(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.rename(src, dst)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def _frames(fh):
    def chunk():
        head = fh.read(4)
        if len(head) < 4:
            raise EOFError("the stream ended early (connection lost?)")
        n = struct.unpack(">I", head)[0]
        if n == 0:
            return b""
        data = fh.read(n)
        if len(data) < n:
            raise EOFError("the stream ended early (connection lost?)")
        return data
    return chunk


def describe(exc):
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename or ""
        return "%s%s" % (exc.strerror, " (%s)" % where if where else "")
    return "%s: %s" % (type(exc).__name__, exc)


def unpack(state_dir, areas, fh):
    reader = HashingReader(_frames(fh))
    tmp = None
    try:
        tmp = extract(reader, state_dir)
        sender = json.loads(fh.readline().decode("utf-8") or "{}")
        problem = sender.get("abort") or reader.matches(sender)
        if problem:
            raise ValueError("copy not used: %s" % problem)
        commit(tmp, state_dir, areas)
        return {"ok": True, "size": reader.size}
    except Exception as exc:  # noqa: BLE001 - reported as one line by the launcher
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        return {"error": describe(exc)}


def main(argv):
    mode, state_dir, areas = argv[0], argv[1], argv[2:]
    if mode == "pack":
        try:
            summary = pack(state_dir, areas, sys.stdout.buffer)
        except Exception as exc:  # noqa: BLE001
            sys.stderr.write(json.dumps({"error": describe(exc)}) + "\n")
            return 1
        sys.stderr.write(json.dumps(summary) + "\n")
        return 0
    if mode == "unpack":
        result = unpack(state_dir, areas, sys.stdin.buffer)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        return 0 if result.get("ok") else 1
    sys.stderr.write("usage: statesync.py pack|unpack STATE_DIR AREA...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
