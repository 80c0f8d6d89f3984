"""``python -m launcher`` is the same as the ``tfcluster`` console script."""

import sys

from launcher.cli import main

sys.exit(main())
