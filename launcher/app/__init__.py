"""The use cases, one module each: up (validate, plan, run and supervise), detach (a run that
outlives the terminal), inspect (status, logs, attach, runs), down, tensorboard. The CLI
calls them; they return typed results (``results``: how the command ended, in words) and say
their progress through the console they are given; the CLI prints the rest and maps the outcome
to the exit code (launcher/errors.py's ``exit_code_for``). Nothing here prints or exits."""
