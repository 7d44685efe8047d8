"""`python -m router.cli`: the `rolegate` command, for environments without the script."""

from __future__ import annotations

import sys

from router.cli.main import main

sys.exit(main())
