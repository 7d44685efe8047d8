"""What every `rolegate` command that talks to the HTTP API shares.

`--url`/`--token` (or ROLEGATE_URL/ROLEGATE_TOKEN; given before the
subcommand, `rolegate --url U status`, or after it), one `ApiClient` per
invocation, and the exit-code contract: 0 done, 1 refused (the API answered
with a conflict, a validation error, an unknown role), 2 usage or connection
error (no answer, a 5xx, a missing or rejected token).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
import requests
from click.core import ParameterSource

from rolegate.errors import InvalidToken
from rolegate.http import ApiClient, ApiError, bearer_token

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2

DEFAULT_URL = "http://127.0.0.1:8080"

F = TypeVar("F", bound=Callable[..., Any])

#: Where the group's `--url`/`--token` (before the subcommand) wait for the subcommand.
_GLOBAL_KEY = "rolegate.global.{}"


def base_url(raw: str) -> str:
    """The API's base URL from what a person typed; ValueError says what is wrong.

    `127.0.0.1:8080` means http:// (as curl reads it); a trailing `/` or `/v1`
    is dropped, since every path the CLI sends starts with /v1 itself. A path
    before that (a proxy's prefix) stays.
    """
    value = raw.strip()
    if not value:
        raise ValueError("the URL is empty")
    if "://" not in value:
        value = f"http://{value}"
    parts = urlsplit(value)
    refused = ValueError(f"{raw!r} is not an http(s) URL like {DEFAULT_URL}")
    try:
        parts.port  # noqa: B018  (reading it is the check: ValueError for a bad port)
    except ValueError:
        raise refused from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise refused
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """The subcommand's value, or the one given before the subcommand if this came by default."""
    name = param.name or ""
    if ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
        key = _GLOBAL_KEY.format(name)
        if key in ctx.meta:
            value = ctx.meta[key]
    return value


def _clean(name: str, value: Any) -> Any:
    if value is None:
        return None
    try:
        return base_url(value) if name == "url" else bearer_token(value)
    except (InvalidToken, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None


def _url_callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    return _clean("url", _global(ctx, param, value))


def _token_callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    return _clean("token", _global(ctx, param, value))


def url_option(help_text: str = "rolegate API [env ROLEGATE_URL].") -> Callable[[F], F]:
    """`--url` (env ROLEGATE_URL), normalized; the group's `--url` stands in when not given."""
    return click.option("--url", envvar="ROLEGATE_URL", default=DEFAULT_URL, show_default=True,
                        callback=_url_callback, help=help_text)


def token_option(help_text: str = "Bearer token [env ROLEGATE_TOKEN].") -> Callable[[F], F]:
    """`--token` (env ROLEGATE_TOKEN), its surrounding whitespace dropped; never echoed."""
    return click.option("--token", envvar="ROLEGATE_TOKEN", default=None,
                        callback=_token_callback, help=help_text)


def _store_global(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    name = param.name or ""
    if value is not None:
        ctx.meta[_GLOBAL_KEY.format(name)] = _clean(name, value)
    return value


def global_options(group: F) -> F:
    """Let `--url` and `--token` come before the subcommand too (`rolegate --url U status`).

    Given there, they count as if given to the subcommand unless it names its own.
    """
    group = click.option("--token", default=None, expose_value=False, callback=_store_global,
                         help="Bearer token for every subcommand [env ROLEGATE_TOKEN].")(group)
    return click.option("--url", default=None, expose_value=False, callback=_store_global,
                        help=f"rolegate API for every subcommand [env ROLEGATE_URL; default "
                             f"{DEFAULT_URL}].")(group)


def exit_code_for(error: ApiError) -> int:
    """Map an API error to the CLI's exit code."""
    if error.status in (401, 403) or error.status >= 500:
        # A bad token is a usage error; a 5xx means the request got no real answer.
        return EXIT_USAGE
    return EXIT_REFUSED


@contextmanager
def api_errors(url: str) -> Iterator[None]:
    """Turn API errors and connection failures into a message and the right exit code."""
    try:
        yield
    except ApiError as exc:
        click.echo(f"error: {exc.status} {exc.code}: {exc.message}", err=True)
        if exc.details:
            click.echo(f"details: {json.dumps(exc.details, sort_keys=True)}", err=True)
        sys.exit(exit_code_for(exc))
    except (requests.ConnectionError, requests.Timeout) as exc:
        click.echo(f"error: cannot reach rolegate at {url}: {exc}", err=True)
        sys.exit(EXIT_USAGE)


def api_command(func: F) -> F:
    """Give a click command `--url` and `--token` and call it with a ready `ApiClient`.

    The wrapped function receives the client as its first argument.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, url: str, token: str | None, **kwargs: Any) -> Any:
        api = ApiClient(url, token)
        try:
            with api_errors(url):
                return func(api, *args, **kwargs)
        finally:
            api.close()

    wrapper = token_option()(wrapper)
    wrapper = url_option()(wrapper)
    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))
