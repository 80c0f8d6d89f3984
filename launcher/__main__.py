"""``python -m launcher`` is the same as the ``tfcluster`` console script."""

from launcher.cli.main import main_entry

main_entry()
