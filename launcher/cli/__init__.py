"""The command line: the parser and the commands (main), shell completion generated from the parser
(completion). It parses, calls a use case of launcher.app, prints what it returns, and exits;
nothing below it imports it."""


def main_entry() -> None:
    """The `tfcluster` console script (pyproject's [project.scripts])."""
    from launcher.cli.main import main_entry as run

    run()
