"""The use cases, one module each: up (a run as a list of typed stages: stages holds their values
and load, discover, plan; probing the open and probe stages; up chains them), detach (a run that
outlives the terminal), inspect (status, logs, attach, runs), down, tensorboard. The CLI
calls them; they return typed results (``results``: how the command ended, in words) and say
their progress through the narrow sinks they are given (``sinks``: the CLI hands them its console
and, for ``attach``, the renderer it built); the CLI renders the rest and maps the outcome to the
exit code (launcher/errors.py's ``exit_code_for``). Nothing here prints, exits or imports
launcher.ui (tests/unit/app/test_use_case_rules.py)."""
