"""The states of a run, an attempt and a task, defined once (str-valued: what is printed and
written is the value). Transitions:

``AttemptState`` -- one attempt of the whole group (``policy.assess``'s verdict, the
supervisor's ``Attempt``): RUNNING -> SUCCEEDED (success per the strategy's rule) | FAILED (a
task's exit, the startup or hang watchdog, the backend) | INTERRUPTED (Ctrl-C, SIGTERM,
``tfcluster down``) | REGROW (elastic runs: a lost host answers again and the shrunk group is
stopped gracefully to restart bigger; launcher/plan/elastic.py). A FAILED attempt is followed by a
new RUNNING one while the restart policy allows; a REGROW one always.

``Outcome`` -- the ``outcome`` event that ends a run record: SUCCEEDED | FAILED | INTERRUPTED
(written by the supervisor from its last attempt) | STOPPED (written by ``tfcluster down`` for a
run whose supervisor was lost).

``RunState`` -- a run as ``status`` and ``runs`` read it from its record (launcher/record/status.py):
RUNNING (no outcome yet, its supervisor alive or not checkable from here) -> SUCCEEDED |
FAILED | STOPPED (its outcome: succeeded; failed; interrupted or stopped) or -> LOST (no outcome
and its supervisor gone) -> STOPPED (once ``tfcluster down`` records the outcome). DAMAGED: a
record that cannot be read (``runs`` lists it, with why).

``TaskState`` -- a task: PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED | STOPPED, with
RESTARTING between attempts and GONE for a task whose process went with its supervisor. One machine
for the live panel, ``status`` and the final report: its transitions, and ``TaskPhase`` (what a
live task's output says it is doing: importing, training, evaluating), are in
launcher/record/fold.py. A failed task's exit is described where it is shown (``status``: "exit
code 3", "killed by SIGKILL (exit 137)", ``procinfo.describe_exit``).

``ResultStatus`` -- a compared run's row in ``tfcluster compare`` (launcher/compare/measure.py):
OK (outcome succeeded and exit 0) | FAILED | INTERRUPTED.
"""

from __future__ import annotations

from launcher.record._vocabulary import Word


class AttemptState(Word):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    REGROW = "regrow"


class Outcome(Word):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"


class RunState(Word):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "supervisor lost"
    DAMAGED = "damaged"


class TaskState(Word):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    GONE = "gone"


class TaskPhase(Word):
    IMPORTING = "importing"
    TRAINING = "training"
    EVALUATING = "evaluating"


class ResultStatus(Word):
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
