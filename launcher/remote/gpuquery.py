"""nvidia-smi on the host it runs on, stdlib only: the host's GPUs (``nvidia-smi -L``, read into
placement units by ``parse_list``) and what a task's GPUs hold and how busy they are (the
figures' two queries). Each call runs nvidia-smi in a process group of its own and ends within
its timeout, the whole group with it.

Run on task hosts beside gpuplace.py (uploaded next to taskwrap.py: the wrapper's ``--gpus`` and
``--gpu-watch``, the preflight agent), and by the launcher itself where it runs the tasks
(launcher/plan/gpus.py: the local host's GPUs; launcher/supervise/gpuwatch.py: the local tasks'
figures). Imports nothing at load; Python 3.6+.
"""


def parse_list(text):
    """``nvidia-smi -L``'s lines -> the host's placement units [(index, name, uuid)]: each GPU
    (``GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)``), except that a GPU in MIG mode is its MIG
    devices, one unit each (``  MIG 1g.5gb     Device  0: (UUID: MIG-...)`` under it: (the GPU's
    index, "NAME MIG 1g.5gb", "MIG-...")), as NVIDIA's MIG user guide shows them (CUDA Device
    Enumeration); CUDA lets a process use one MIG device, so a MIG device is given whole, one per
    task. Anything else is skipped."""
    out = []
    parent = None  # (index, name, uuid) of the GPU the MIG lines below belong to
    migs = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("MIG ") and parent is not None:
            head, _, rest = stripped.partition(" Device")
            uuid = rest.rpartition("(UUID: ")[2].rstrip(")").strip()
            if uuid:
                migs.setdefault(parent[0], []).append((parent[0], "%s MIG %s" % (parent[1], head[4:].strip()), uuid))
            continue
        if not line.startswith("GPU "):
            continue
        head, _, rest = line.partition(": ")
        try:
            index = int(head[4:])
        except ValueError:
            continue
        name, _, uuid = rest.rpartition(" (UUID: ")
        if not _:
            name, uuid = rest, ""
        parent = (index, name.strip(), uuid.rstrip(")").strip())
        out.append(parent)
    return [m for g in out for m in migs.get(g[0], [g])]


def host_gpus(timeout=10.0, fresh_for=0.0):
    """This host's placement units from ``nvidia-smi -L``: [(index, name, uuid)]; [] when
    nvidia-smi is missing, fails or times out (no NVIDIA GPU this run can use)."""
    return host_gpus_checked(timeout, fresh_for)[0]


# This process's last ``-L`` answer: (time.monotonic() when it came, (units, failure)).
_LAST = []
# How long the task wrapper takes the answer its process already has: the ssh host agent asks in
# the preflight and becomes the wrapper, whose GPU request and GPU watch ask again moments later.
# nvidia-smi -L costs a fork and exec on any host, and 0.1-1 s of NVML's start on a GPU host
# without persistence mode; GPUs do not come and go between a host's preflight and its task.
FRESH = 30.0


# nvidia-smi's exit status when it found no GPU (nvidia-smi(1), RETURN VALUE: 6 "A query to find
# an object was unsuccessful"): no GPU, not a failure.
NO_DEVICES = 6


def _run(argv, timeout, merge_stderr=False):
    """(exit code, stdout bytes) of ``argv`` run in a process group of its own; TimeoutExpired past
    ``timeout`` s, once the whole group is killed (SIGKILL): a hung nvidia-smi, or a child of it
    that keeps the pipe open, never outlives the timeout (``subprocess.run`` kills only the child
    it started). Stdlib only, as launcher.system.procinfo.run_bounded does it where the launcher runs."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    finally:
        if proc.returncode is None:  # timed out (or interrupted): the group goes, whatever holds the pipe
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.stdout.close()
            proc.wait()


def host_gpus_checked(timeout=10.0, fresh_for=0.0):
    """(units, failure): ``host_gpus``'s list and, when nvidia-smi is missing, fails (other than
    finding no GPU) or times out, its own words in one bounded line (None otherwise).
    ``fresh_for`` > 0: an answer this process got that many seconds ago or less is given again
    (``FRESH``: the wrapper's); else nvidia-smi is asked."""
    import time

    if fresh_for > 0 and _LAST and time.monotonic() - _LAST[0][0] <= fresh_for:
        return _LAST[0][1]
    got = _host_gpus_checked(timeout)
    _LAST[:] = [(time.monotonic(), got)]
    return got


def _host_gpus_checked(timeout):
    import subprocess

    try:
        code, out = _run(["nvidia-smi", "-L"], timeout, merge_stderr=True)
        proc = subprocess.CompletedProcess(["nvidia-smi", "-L"], code, out)
    except FileNotFoundError:
        return [], "nvidia-smi not found (no NVIDIA driver installed)"
    except subprocess.TimeoutExpired:
        return [], "nvidia-smi -L did not answer in %gs" % timeout
    except (OSError, subprocess.SubprocessError) as exc:
        return [], "nvidia-smi -L could not run: %s" % _words(str(exc))
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode == NO_DEVICES:
        return [], None
    if proc.returncode != 0:
        return [], "nvidia-smi -L failed (exit %d): %s" % (proc.returncode, _words(text) or "no output")
    return parse_list(text), None


def _words(text, limit=200):
    """Outside bytes as one bounded printable line."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


# What a task's GPUs hold and how busy they are (launcher/supervise/gpuwatch.py samples the local tasks, the
# task wrapper, ``--gpu-watch``, its own task on an ssh host): the queries and their parsing.
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
GPUS_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total",
              "--format=csv,noheader,nounits"]


def _int(text):
    try:
        return int(float(text.strip()))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_apps(text):
    """``pid, used_memory`` lines -> {pid: MiB} (a pid listed on several GPUs: the sum)."""
    out = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 2:
            continue
        pid, mib = _int(parts[0]), _int(parts[1])
        if pid is not None and mib is not None:
            out[pid] = out.get(pid, 0) + mib
    return out


def parse_gpus(text):
    """``index, utilization.gpu, ...`` lines -> {index: utilisation % or None}."""
    out = {}
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < 2:
            continue
        index = _int(parts[0])
        if index is not None:
            out[index] = _int(parts[1])
    return out


def figures(pids, ids, apps, utils):
    """(MiB the processes ``pids`` hold, utilisation % of the busiest of GPUs ``ids`` or None)."""
    busy = [utils[i] for i in ids if utils.get(i) is not None]
    return sum(apps.get(pid, 0) for pid in pids), (max(busy) if busy else None)


def query(timeout=5.0):
    """Both queries: ({pid: MiB}, {index: util}), or None when nvidia-smi is missing, fails or
    times out."""
    import subprocess

    try:
        apps = subprocess.CompletedProcess(APPS_QUERY, *_run(APPS_QUERY, timeout))
        gpus = subprocess.CompletedProcess(GPUS_QUERY, *_run(GPUS_QUERY, timeout))
    except (OSError, subprocess.SubprocessError):
        return None
    if apps.returncode != 0 or gpus.returncode != 0:
        return None
    return parse_apps(apps.stdout.decode("utf-8", "replace")), parse_gpus(gpus.stdout.decode("utf-8", "replace"))
