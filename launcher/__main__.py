"""``python -m launcher`` is the same as the ``tfcluster`` console script."""

import sys

from launcher.cli.main import main

sys.exit(main())
