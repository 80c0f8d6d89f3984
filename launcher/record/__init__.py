"""The run record's vocabulary, defined once: where a run's files are and what they are called
(``layout``), the kinds of events ``events.jsonl`` holds (``events.Event``), and the states a
run, an attempt and a task go through (``states``). launcher/rundir.py writes the record and
reads its events, launcher/runstate.py and launcher/runfeed.py read it back; they and every
module that names a record file, an event kind or a state import them from here
(tests/unit/test_record_vocabulary.py keeps it so).
"""

from .events import Event
from .layout import (EVENTS_FILE, LAUNCHER_FILE, OUTPUT_FILE, PLAN_FILE, RECORD_FILES, SNAPSHOT_FILE, SUPERVISOR_LOG,
                     allocation_path, later_plan_name, log_path, name_dir, runs_dir, state_dir)
from .states import AttemptState, Outcome, ResultStatus, RunState, TaskState

__all__ = ["Event", "EVENTS_FILE", "LAUNCHER_FILE", "OUTPUT_FILE", "PLAN_FILE", "RECORD_FILES", "SNAPSHOT_FILE",
           "SUPERVISOR_LOG",
           "allocation_path", "later_plan_name", "log_path", "name_dir", "runs_dir", "state_dir",
           "AttemptState", "Outcome", "ResultStatus", "RunState", "TaskState"]
