"""The `rolegate` command line: one module per command group, assembled in `main`.

`main` (the console script `rolegate`) lives in `router.cli.main`; each group
(`serve`, `bindings ...`, `gatekeeper`, `criteria`, `suite`, ...) is a module
here exposing `register(main)`. Shared exit codes and the API helper live in
`router.cli.common`. Commands talk to the router over HTTP only.
"""

from __future__ import annotations

from router.cli.main import main

__all__ = ["main"]
