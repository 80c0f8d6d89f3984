"""The environment variables tfcluster sets for a task, named once: the launcher sets them, the
worker (worker/) reads them. A leaf: imports nothing (the worker imports it without TensorFlow).

Use them as ``envnames.STATE_DIR``; a new variable starts here.
"""

from __future__ import annotations

# Set for every task by the plan (launcher/plan/build.py).
TASK = "TFCLUSTER_TASK"  # the task's key, "worker:3"
NAME = "TFCLUSTER_NAME"  # the spec's name
STRATEGY = "TFCLUSTER_STRATEGY"  # the spec's strategy: the worker's --strategy default
# "tf_keras": a Python task's ``import keras`` is tf_keras (launcher/contract/kerasalias.py; the spec's
# ``keras``, launcher/plan/kerasplan.py): multi_worker_mirrored and parameter_server, unless ``keras: 3``.
KERAS = "TFCLUSTER_KERAS"
CPUS = "TFCLUSTER_CPUS"  # devices: {cpus: N}
THREADS = "TFCLUSTER_THREADS"  # devices: {threads: auto}: "I/N", the task's place among N on its host (launcher/plan/threads.py)
# devices: {gpus_per_task, gpu_memory} (launcher/plan/gpus.py, launcher/remote/gpuplace.py): where the plan
# cannot know a host's GPUs, the task's GPU request, completed where it starts (by the task wrapper)
# into CUDA_VISIBLE_DEVICES and the memory variables, then removed.
GPUS = "TFCLUSTER_GPUS"
GPU_MEMORY = "TFCLUSTER_GPU_MEMORY"  # devices: {gpu_memory: MiB}: each visible GPU's memory limit, MiB
CPU_FALLBACK = "TFCLUSTER_CPU_FALLBACK"  # devices: {cpu_fallback: true}: "1": no visible GPU is fine, train on CPU
# collective: {implementation, timeout}: what MultiWorkerMirroredStrategy's CommunicationOptions get.
COLLECTIVE = "TFCLUSTER_COLLECTIVE"  # auto | ring | nccl
COLLECTIVE_TIMEOUT = "TFCLUSTER_COLLECTIVE_TIMEOUT"  # seconds
TPU = "TFCLUSTER_TPU"  # tpu: name, zone, project
TPU_ZONE = "TFCLUSTER_TPU_ZONE"  # tpu: zone
TPU_PROJECT = "TFCLUSTER_TPU_PROJECT"  # tpu: project

# Set by the backend that starts the task: where its run record and its state dir are on its host.
RUN_DIR = "TFCLUSTER_RUN_DIR"  # the run's record dir (runs/<name>/<run id>) as the task's host sees it
STATE_DIR = "TFCLUSTER_STATE_DIR"  # the state dir: checkpoints, backups, the final model, TensorBoard logs
# "1": the task's state dir is its host's own (state.sync: copy, private disks): every worker keeps
# its own backups there, not only the chief, so a backup outlives the chief's host.
STATE_PRIVATE = "TFCLUSTER_STATE_PRIVATE"

# Set by the supervisor for each attempt.
RUN_ID = "TFCLUSTER_RUN_ID"  # the run's id, the name of its record dir
# Set by `up --detach` in its supervisor's environment: the run id, the mark `tfcluster down`
# looks for before it signals a pid launcher.json names (launcher/system/procinfo.py's not_own).
SUPERVISOR = "TFCLUSTER_SUPERVISOR"
RESTART_COUNT = "TFCLUSTER_RESTART_COUNT"  # 0-based attempt number
STANDBY = "TFCLUSTER_STANDBY"  # "1": a warm standby, waiting for SIGUSR1
# A warm standby's promotion file: the next attempt's environment (JSON), written by the backend
# just before the SIGUSR1 that promotes it (the plan, so TF_CONFIG, may have changed since its start).
STANDBY_ENV = "TFCLUSTER_STANDBY_ENV"
# The task's control channel (launcher/remote/taskstream.py): the number of a descriptor it inherits,
# a pipe to its wrapper. What tfcluster acts on goes there, one line each, never on stdout or stderr:
# the liveness beats and stacks, the progress records (``tfcluster-step ...``), the standby protocol.
CONTROL_FD = "TFCLUSTER_CONTROL_FD"
ZYGOTE_PAD = "TFCLUSTER_ZYGOTE_PAD"  # the zygote's room for each child's own variables in /proc/PID/environ

# Set by `tfcluster compare` for its runs (launcher/compare/configs.py).
EPOCH_EVAL = "TFCLUSTER_EPOCH_EVAL"  # "1": evaluate after every epoch
PROGRESS_EVERY = "TFCLUSTER_PROGRESS_EVERY"  # a progress line every N steps

# Read by the CLI (launcher/cli/parser.py), never set for a task.
FILE = "TFCLUSTER_FILE"  # the spec a command reads when no FILE is given (before ./cluster.yaml)
