"""The code that runs beside a task, in one package: stdlib-only and standalone, never run by the
launcher itself (it imports at most their constants).

* taskwrap.py, the per-task wrapper: every backend runs it (local and slurm as a file here, ssh
  uploads it, the docker image runs its copy in /usr/local/lib/tfcluster/, its
  tfcluster.lifeline label); taskstream.py, its framed stream: the task's output and its control
  channel on one stream only the wrapper writes (on a Slurm node, run on its own in the step);
* agent.py, boot.py, statesync.py, pathtrust.py (whether another user could swap a dir): helpers the ssh backend sends to hosts (uploaded, or passed to
  ``python -c``);
* jobsetpod.py, a JobSet pod's start (``tfcluster export --to jobset``): the worker image's copy in
  /usr/local/lib/tfcluster/ makes the task's TF_CONFIG from its pod index and execs the entrypoint;
* taskenv.py, what the wrapper sets in its task's environment from its host (threads, GPUs) and
  its GPU watch; gcewatch.py, its watch of GCE's preemption notice;
  promotion.py, a standby's promoted environment (zygoteask.py's, and the standby stub's text);
  masking.py, what a secret is (the plan's text and records, and a forked task's title, mask with it);
* zygote.py, a host's fork server (zygotewait.py: each task's waiter, its parent; zygotechild.py:
  the task's side): the wrapper asks it for its task (``--zygote``, zygoteask.py), the local
  backend starts one per run (launcher/backends/zygotes.py), the ssh backend one per host;
* zygotehost.py: the ssh host agent's start of its host's zygote for the run, and its keep;
* zygotewarm.py: its server kept warm past the run (ssh.keep_warm);
* privsock.py: the zygote's socket, bound where only its user can reach it (every starter's bind);
* sibling.py: how these files import each other from the dir they are shipped in;
* gpuplace.py, which of its host's GPUs a task gets, and gpuquery.py, nvidia-smi's answers: uploaded
  next to taskwrap.py (the wrapper and the preflight agent run them on the hosts), and the modules
  here the launcher also runs (launcher/plan/gpus.py, launcher/supervise/gpuwatch.py), so a task
  gets the same GPUs whether the plan or its host made them.

The one locator of this code: ``taskwrap_path()`` for the wrapper, ``source(name)`` for the text
of any of these files, ``TASK_FILES`` for those a task's host needs beside the task."""

from pathlib import Path

HERE = Path(__file__).resolve().parent

# What a task's host needs beside the task: the wrapper, its start over ssh, and the modules they
# import from their own dir. The ssh backend uploads them into each run dir; the worker image
# copies them (with jobsetpod.py) into /usr/local/lib/tfcluster/; local and slurm run the wrapper
# here, beside them. tests/unit/remote/test_shipped.py checks the list against their imports.
TASK_FILES = ("taskwrap.py", "taskstream.py", "boot.py", "taskenv.py", "gpuplace.py", "gpuquery.py", "zygote.py",
              "zygoteask.py", "zygotechild.py", "zygotewait.py", "zygotehost.py", "zygotewarm.py", "privsock.py",
              "sibling.py", "gcewatch.py", "promotion.py", "masking.py")


def task_files() -> dict[str, str]:
    """Name -> text of each of ``TASK_FILES``."""
    return {name: source(name) for name in TASK_FILES}


def source(name: str) -> str:
    """The text of a module shipped to hosts (``agent.py``, ``boot.py``, ``taskwrap.py``...)."""
    return (HERE / name).read_text(encoding="utf-8")


def agent_source() -> str:
    """What the ssh backend passes to ``python -S -c`` on a host: pathtrust.py's text,
    launcher/contract/portcheck.py's, then agent.py's. The agent checks its dirs with pathtrust
    before it writes, imports or runs anything in them, and cannot import it from a dir it has not
    checked yet; a task port in use is named with its holder (portcheck's port_holders)."""
    from launcher.contract import portcheck

    return (source("pathtrust.py") + "\n" + Path(portcheck.__file__).read_text(encoding="utf-8") + "\n"
            + source("agent.py"))


def pathtrust_command_source() -> str:
    """pathtrust.py's text with its ``main`` called: ``python -S -c`` this, DIR, FILE... (a
    restart's check of its run dir before ``boot.py`` runs from it)."""
    return source("pathtrust.py") + "\nimport sys\nsys.exit(main(sys.argv[1:]))\n"


def taskwrap_path() -> Path:
    """launcher/remote/taskwrap.py, the per-task wrapper: run as a file by the local and slurm
    backends, uploaded next to ``boot.py`` by the ssh backend."""
    return HERE / "taskwrap.py"


def wrapper_argv() -> list[str]:
    """How this machine starts the per-task wrapper: this interpreter with -S. The wrapper needs
    only the stdlib, and skipping site (a virtualenv's .pth files, editable installs) makes its
    start about 90 ms of CPU shorter and its Rss 2-3 MB smaller; the task it starts gets its own
    interpreter's usual start (the ssh backend runs boot.py with -S too: ssh/commands.py)."""
    import sys

    return [sys.executable, "-S", str(taskwrap_path())]
