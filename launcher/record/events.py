"""The kinds of event a run record holds: the ``event`` of every line of ``events.jsonl``.

Written through ``RunRecord.event`` (the supervisor and the backends) or ``writer.append_event``
(``tfcluster down`` of a run whose supervisor is gone), never as bare strings
(tests/unit/record/test_record_vocabulary.py checks every call). A run's events come in this order:

    run_start
    per attempt: start (each task; a warm standby: standby_start, standby_promoted) -> ready
        (each task's TF port open) -> attempt_ready; exit (each task), sidecar_failed (an
        evaluator), task_restart (a parameter_server worker restarted alone), failure (the
        attempt's root cause), stopped / stop_unconfirmed (tasks stopped at the attempt's end)
    restart (the next attempt, after a failure of the training)
        [elastic, instead of a restart: host_lost (a host whose session was lost or that does not
        answer: suspect until it answers for elastic.settle s; its ``how`` says so), then replan
        (tasks moved or left out), or host_added with spare false (the group waited for the host
        and restarts on it)]
    host_preempted (ssh: a task's wrapper saw GCE's preemption notice; its host is lost at once)
    discovery (elastic: discovery.command's answer changed the hosts, or failed: ok, added, gone,
        problem)
    host_added (elastic: a lost or newly found host answered for elastic.settle s: a spare again, or
        grow: replan to a bigger group after the attempt stopped gracefully)
    outcome (last; written once, also by ``tfcluster down`` for a lost supervisor)

and in between: gpu_usage (where nvidia-smi answers, a sample of each GPU task's memory and
utilisation that changed: launcher/supervise/gpuwatch.py, or the ssh task wrapper), task_gpus (the GPUs a task
got where it started, as that machine numbers them, where the backend learns them only there: a
Slurm step, the ssh task wrapper); backends' own: state_sync, state_copy, state_fetch (ssh's state dir),
slurm_submitted, slurm_running, slurm_cancelled (Slurm's allocation), standby_stopped.
A new kind goes here first; readers (record/view, reader, feed, compare/measure) ignore kinds
they do not know.
"""

from __future__ import annotations

from launcher.record._vocabulary import Word


class Event(Word):
    RUN_START = "run_start"
    START = "start"
    READY = "ready"
    ATTEMPT_READY = "attempt_ready"
    EXIT = "exit"
    SIDECAR_FAILED = "sidecar_failed"
    FAILURE = "failure"
    RESTART = "restart"
    TASK_RESTART = "task_restart"
    STOPPED = "stopped"
    STOP_UNCONFIRMED = "stop_unconfirmed"
    STANDBY_START = "standby_start"
    STANDBY_PROMOTED = "standby_promoted"
    STANDBY_STOPPED = "standby_stopped"
    HOST_LOST = "host_lost"
    REPLAN = "replan"
    HOST_ADDED = "host_added"
    HOST_PREEMPTED = "host_preempted"
    DISCOVERY = "discovery"
    OUTCOME = "outcome"
    STATE_SYNC = "state_sync"
    STATE_COPY = "state_copy"
    STATE_FETCH = "state_fetch"
    SLURM_SUBMITTED = "slurm_submitted"
    SLURM_RUNNING = "slurm_running"
    SLURM_CANCELLED = "slurm_cancelled"
    GPU_USAGE = "gpu_usage"
    TASK_GPUS = "task_gpus"
