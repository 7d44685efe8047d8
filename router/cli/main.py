"""The `rolegate` command line: operators' commands over the HTTP API, and the servers.

Each group of commands lives in its own module exposing `register(main)`; this
module only assembles them. Exit codes are a contract: 0 done, 1 refused
(conflict, validation, a failed gate), 2 usage or connection error.
"""

from __future__ import annotations

import importlib
import sys

import click

# Defined in cli_common so command modules need not import this module (which
# imports them). Re-exported here for existing callers.
from router.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, global_options

__all__ = ["COMMAND_MODULES", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "main"]

#: Modules that add commands to `main` through their `register(main)` function.
COMMAND_MODULES: tuple[str, ...] = (
    "router.cli.serve",
    "router.cli.bindings",
    "router.cli.status",
    "router.cli.edit",
    "router.cli.gatekeeper",
    "router.cli.criteria",
    "router.cli.suite",
    "router.cli.traces",
    "router.cli.tokens",
    "router.cli.mcp",
    "router.cli.export",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rolegate")
@global_options
def main() -> None:
    """rolegate: staged rollouts and config bindings for AI agents."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(main)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
