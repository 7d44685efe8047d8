"""`rolegate tokens new`: make a token and the ROLEGATE_TOKENS_FILE line that admits it.

The token is printed once and never stored: the file keeps only its SHA-256,
so whoever can read the file cannot call the API with it. Runs offline.
"""

from __future__ import annotations

import click

from router.server.tokens import SCOPES, file_line, new_token


@click.group("tokens")
def tokens() -> None:
    """Caller, reviewer, gatekeeper and operator tokens."""


@tokens.command("new")
@click.argument("name")
@click.option("--scope", type=click.Choice(SCOPES), required=True,
              help="What the token may do (operator: everything).")
@click.option("--role", "roles", multiple=True,
              help="A role the token may act on (repeatable) [default: every role].")
def new(name: str, scope: str, roles: tuple[str, ...]) -> None:
    """Print a new token for NAME and the line to add to ROLEGATE_TOKENS_FILE."""
    token = new_token()
    try:
        line = file_line(name, token, scope, list(roles) or None)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"token: {token}")
    click.echo(f"line:  {line}")
    click.echo("Give the token to its holder (it is shown only now); add the line to the "
               "file ROLEGATE_TOKENS_FILE names. Routers pick it up within a second.",
               err=True)


def register(main: click.Group) -> None:
    """Add `tokens` to the `rolegate` command group."""
    main.add_command(tokens)
