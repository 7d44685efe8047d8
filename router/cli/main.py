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

__all__ = ["COMMANDS", "COMMAND_MODULES", "EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "main"]

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


#: Each command `main` offers, and the modules whose `register(main)` build it (`bindings`
#: takes edit's subcommands too). A command's modules are imported when it is run, so
#: `rolegate bindings get` loads neither the gatekeeper, gunicorn nor OpenTelemetry: the
#: CLI started in about 1 s of CPU, the commands over HTTP now take about a third of that
#: (`python -X importtime -m router.cli status --help`). tests/test_cli.py holds the table
#: to what the modules register.
COMMANDS: dict[str, tuple[str, ...]] = {
    "serve": ("router.cli.serve",),
    **dict.fromkeys(("bindings", "canary", "rollback", "promote", "pause", "resume",
                     "approve", "resolve"), ("router.cli.bindings", "router.cli.edit")),
    "status": ("router.cli.status",),
    "gatekeeper": ("router.cli.gatekeeper",),
    **dict.fromkeys(("criteria", "feedback", "golden"), ("router.cli.criteria",)),
    "suite": ("router.cli.suite",),
    "traces": ("router.cli.traces",),
    "tokens": ("router.cli.tokens",),
    "mcp": ("router.cli.mcp",),
    "export-otlp": ("router.cli.export",),
}


class _LazyGroup(click.Group):
    """A group that imports a command's modules only when the command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, registered yet or not (help lists them all, importing each)."""
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its modules registered first if this is its first use."""
        if cmd_name not in self.commands:
            for module in COMMANDS.get(cmd_name, ()):
                importlib.import_module(module).register(self)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rolegate")
@global_options
def main() -> None:
    """rolegate: staged rollouts and config bindings for AI agents."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
