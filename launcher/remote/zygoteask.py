"""The wrapper's side of the zygote (zygote.py): ask it for a task, then wait for that task's end.
Stdlib only, shipped beside taskwrap.py, which imports it (``--zygote``)."""

import json
import os
import select
import socket
import struct


def ask(path: str, argv: list, env: dict, cwd: str, fds: list, wait: float):
    """Ask the zygote at ``path`` for a child running ``argv``: (socket, pid) or (None, why not).
    Waits up to ``wait`` seconds for the socket to appear and for the answer (the import)."""
    import time

    deadline = time.monotonic() + wait
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    while True:
        try:
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            if time.monotonic() > deadline:
                sock.close()
                return None, f"no zygote at {path} ({exc.strerror})"
            time.sleep(0.05)
        except OSError as exc:
            sock.close()
            return None, f"zygote {path}: {exc.strerror}"
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                             struct.calcsize("3i")))
    except OSError as exc:
        sock.close()
        return None, f"zygote {path}: {exc.strerror}"
    if uid != os.getuid():  # another user's server there: nothing of ours (environment, stdio) goes to it
        sock.close()
        return None, f"{path} is served by uid {uid}, not by this user"
    body = json.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd}).encode()
    try:
        socket.send_fds(sock, [struct.pack("!I", len(body))], fds)
        sock.sendall(body)
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        answer = _read_line(sock)
    except OSError as exc:
        sock.close()
        return None, f"zygote {path}: {exc.strerror or exc}"
    if not answer:
        sock.close()
        return None, "the zygote closed without an answer"
    if "pid" in answer:
        sock.settimeout(None)
        return sock, int(answer["pid"])
    sock.close()
    return None, str(answer.get("cold", "refused"))[:300]


def _read_line(sock) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            return {}
        data += chunk
        if len(data) > 65536:
            return {}
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def wait_status(sock, pid: int) -> "int | None":
    """The child's waitpid status from the zygote, or None where the zygote ended first (then
    this waits for the child itself to end)."""
    try:
        answer = _read_line(sock)
    except OSError:
        answer = {}
    finally:
        sock.close()
    if "status" in answer:
        return int(answer["status"])
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
    return None
