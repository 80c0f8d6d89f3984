"""The run record. Its vocabulary, defined once: where a run's files are and what they are called
(``layout``), the kinds of events ``events.jsonl`` holds (``events.Event``), and the states a
run, an attempt and a task go through (``states``); every module that names a record file, an
event kind or a state imports them from here (tests/unit/record/test_record_vocabulary.py keeps it so).

Its modules: ``events`` holds one frozen dataclass per event kind (the hosts' and the backends'
own in ``hostevents``, the supervisor's own steps and verdicts in ``supervisorevents``, all named
in ``events`` too) and ``parse_event``, which checks every field
with ``eventbase``'s checks (RunRecordDamaged, one line, for anything tfcluster never writes;
``eventbase`` also holds the ``Event`` words and the events' base class); ``writer``
writes the record (``RunRecord.write(event)``, ``append_event``); ``reader`` is the one reader
of its files (events.jsonl, plan.json, launcher.json, <backend>.json) and finds its runs;
``fold`` is the task state machine and the one fold of events into it (view and status share it);
``run`` is the one run fold (start, attempts, group size over time, outcome: ``RunFacts``);
``view`` is the one run model (RunModel) the live panel and the final report show (its tasks:
``taskview``; its host membership in elastic runs: ``hosts``); ``feed``
replays a record into a RunModel (and writes its snapshots; its listeners get each event: ``attach``
says them); ``noise`` knows TensorFlow's harmless lines and the tail a failure's report shows;
``stacks`` parses faulthandler's text; ``status`` is a run as ``status``
and ``runs`` show it: the replayed RunModel plus what only the record says (run state, attempts,
the supervisor, each task's folded state, whether its process is alive).
This package's __init__ imports only the vocabulary (policy.py imports record.states, and
status imports policy), so import those modules by name: ``from launcher.record.writer import ...``.
"""

from launcher.record.events import Event
from launcher.record.layout import (EVENTS_FILE, LAUNCHER_FILE, OUTPUT_FILE, PLAN_FILE, RECORD_FILES, SNAPSHOT_FILE, SUPERVISOR_LOG,
                     allocation_path, later_plan_name, log_path, name_dir, runs_dir, state_dir)
from launcher.record.states import AttemptState, Outcome, ResultStatus, RunState, TaskPhase, TaskState

__all__ = ["Event", "EVENTS_FILE", "LAUNCHER_FILE", "OUTPUT_FILE", "PLAN_FILE", "RECORD_FILES", "SNAPSHOT_FILE",
           "SUPERVISOR_LOG",
           "allocation_path", "later_plan_name", "log_path", "name_dir", "runs_dir", "state_dir",
           "AttemptState", "Outcome", "ResultStatus", "RunState", "TaskPhase", "TaskState"]
