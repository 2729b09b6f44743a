"""``python -m coat``: the ``coat`` command (coat/cli.py)."""

import sys

from .cli import main

sys.exit(main())
