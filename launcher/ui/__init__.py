"""What a person reads: the console (one-line errors and notes, people's lines for the worker's
protocol), the live panel on a terminal, the final report, the plan as text (plantext), a run
record's status and run list (runstatus), and the filter for TensorFlow's start-up noise; the tables
through one renderer (table) with the task columns declared once (columns).
Backends and the supervisor write through ui.console.Console; nothing here starts or stops
anything."""
