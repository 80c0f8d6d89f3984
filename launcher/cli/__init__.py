"""The command line: the parser (parser.py: every command and flag, and the spec each names), the
commands (main.py lists them: specfile.py validate/plan/schema, lifecycle.py up/down/tensorboard,
inspect.py status/logs/attach/runs, files.py compose/export, compare.py), shell completion and the
docs' reference generated from the parser (completion.py, docsgen.py). A command turns its args into
a typed call of a use case (launcher.app, export, compare), prints what it returns and chooses the
exit code; nothing below this package imports it. A new command: its flags and examples in
parser.py, a function in the module of its group, one line in main.COMMANDS."""


def main_entry() -> None:
    """The `tfcluster` console script (pyproject's [project.scripts])."""
    from launcher.cli.main import main_entry as run

    run()
