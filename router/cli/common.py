"""What every `rolegate` command that talks to the HTTP API shares.

`--url`/`--token` (or ROLEGATE_URL/ROLEGATE_TOKEN), one `ApiClient` per
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

import click
import requests

from rolegate.http import ApiClient, ApiError

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2

DEFAULT_URL = "http://127.0.0.1:8080"

F = TypeVar("F", bound=Callable[..., Any])


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

    wrapper = click.option("--token", envvar="ROLEGATE_TOKEN", default=None,
                           help="Bearer token [env ROLEGATE_TOKEN].")(wrapper)
    wrapper = click.option("--url", envvar="ROLEGATE_URL", default=DEFAULT_URL,
                           show_default=True, help="rolegate API [env ROLEGATE_URL].")(wrapper)
    return wrapper  # type: ignore[return-value]


def echo_json(value: Any) -> None:
    """Print `value` as indented JSON."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))
