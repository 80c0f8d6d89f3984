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

``TaskState`` -- a task. As the live panel and the final report show it (launcher/record/view.py,
fed events and output lines): PENDING -> STARTING (its ``start`` event) -> IMPORTING (its first
line) -> READY (its TF port open, or a PSS server line) -> TRAINING (a progress line) <->
EVALUATING (an evaluator's eval line) -> SUCCEEDED (exit 0) | FAILED (another exit, or named by a
``failure``) | STOPPED (stopped at the attempt's end); RESTARTING (a group ``restart`` or a
``task_restart``) -> STARTING again. As ``status`` shows it from the record alone
(launcher/record/status.py): NOT_STARTED -> STARTING -> RUNNING (ready) -> SUCCEEDED | STOPPED |
EXITED (an exit without a code) | the exit described ("exit code 3", "killed by SIGKILL (exit
137)", ``policy.describe_exit``); GONE when its supervisor is lost and its process too.

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
    NOT_STARTED = "not started"
    STARTING = "starting"
    IMPORTING = "importing"
    READY = "ready"
    RUNNING = "running"
    TRAINING = "training"
    EVALUATING = "evaluating"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    EXITED = "exited"
    GONE = "gone"


class ResultStatus(Word):
    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
