"""Entry point: `python3 -m lab` (run from the repository root)."""

import sys

from lab.cli import main

sys.exit(main())
