"""``python -m attnum`` runs the CLI."""

import sys

from attnum.cli import main

sys.exit(main())
