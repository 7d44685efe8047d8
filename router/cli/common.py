"""What every `rolegate` command that talks to the HTTP API shares.

`--url`/`--token` (or ROLEGATE_URL/ROLEGATE_TOKEN; given before the
subcommand, `rolegate --url U status`, or after it), one `ApiClient` per
invocation, and the exit-code contract: 0 done, 1 refused (the API answered
with a conflict, a validation error, an unknown role), 2 usage or connection
error (no answer, a 5xx, a missing or rejected token).
"""

from __future__ import annotations

import difflib
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
from pydantic import ValidationError

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


def percent_hint(text: str) -> str:
    """`: 0.1 means 10%` for `10%` (the fraction meant), else the general rule."""
    try:
        percent = float(text.removesuffix("%"))
    except ValueError:
        return ": 0.1 means 10%"
    return f": {percent / 100:g} means {text}"


def field_errors(exc: ValidationError, whole: str = "(file)") -> list[str]:
    """`where: what` per error of a pydantic ValidationError, without its URLs and input echo.

    A percentage where a fraction belongs (share=10%) says which fraction was meant.
    """
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or whole
        message = str(error["msg"]).removeprefix("Value error, ")
        given = error.get("input")
        if isinstance(given, str) and given.strip().endswith("%"):
            message += f" (a share or rate is a fraction of 1{percent_hint(given.strip())})"
        lines.append(f"{where}: {message}")
    return lines


def unknown_role_hint(api: ApiClient, role: str) -> str | None:
    """Which roles exist (and the likeliest meant), when `role` is not one of them."""
    try:
        roles = sorted(api.get("/v1/bindings")["roles"])
    except (ApiError, requests.RequestException, KeyError, TypeError, ValueError):
        return None
    if role in roles:
        return None
    if not roles:
        return "there are no roles yet (rolegate bindings import FILE creates them)"
    close = difflib.get_close_matches(role, roles, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"roles that exist: {', '.join(roles)}{guess}"


@contextmanager
def api_errors(url: str, api: ApiClient | None = None) -> Iterator[None]:
    """Turn API errors and connection failures into a message and the right exit code.

    With `api`, a 404 for a role that does not exist also says which roles do.
    """
    try:
        yield
    except ApiError as exc:
        click.echo(f"error: {exc.status} {exc.code}: {exc.message}", err=True)
        role = exc.details.get("role") if isinstance(exc.details, dict) else None
        hint = (unknown_role_hint(api, role) if api is not None and exc.status == 404
                and isinstance(role, str) else None)
        if hint:
            click.echo(f"hint: {hint}", err=True)
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
            with api_errors(url, api):
                return func(api, *args, **kwargs)
        finally:
            api.close()

    wrapper = token_option()(wrapper)
    wrapper = url_option()(wrapper)
    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))
