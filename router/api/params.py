"""Reading path and query parameters and headers: the value, or a 400 naming what is wrong."""

from __future__ import annotations

import math

from flask import request

from bindings.models import validate_role_name
from router.api.client_view import BODY_MODES, VIEWS
from router.server.errors import BadRequest


def role_param(role: str) -> str:
    """`role` from a URL path if it is a usable role name, else BadRequest."""
    try:
        return validate_role_name(role)
    except ValueError as exc:
        raise BadRequest(str(exc), field="role") from None


def version_param(raw: str) -> int:
    """A version number from a URL path (1 or more), else BadRequest."""
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18 or int(raw) < 1:
        raise BadRequest(f"version: expected a whole number from 1, got {raw!r}",
                         field="version")
    return int(raw)


def if_match(what: str) -> int | None:
    """The version number in the `If-Match` header (quotes and W/ allowed); None if absent.

    `what` names the versioned thing in the error ("binding", "config").
    """
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    try:
        return int(raw.strip().removeprefix("W/").strip('"'))
    except ValueError:
        raise BadRequest(f"If-Match: expected a {what} version number, got {raw!r}") from None


def int_arg(name: str, default: int | None) -> int | None:
    """The non-negative whole number in query parameter `name`; `default` if absent."""
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name}: expected a whole number, got {raw!r}", field=name) from None
    if value < 0:
        raise BadRequest(f"{name}: must not be negative", field=name)
    return value


def seconds_arg(name: str, default: float) -> float:
    """The finite, non-negative number of seconds in query parameter `name`; `default` if absent."""
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"{name}: expected seconds, got {raw!r}", field=name) from None
    if not 0 <= value < math.inf:  # also refuses NaN
        raise BadRequest(f"{name}: expected a finite, non-negative number of seconds, "
                         f"got {raw!r}", field=name)
    return value


def view_arg() -> str:
    """`?view=` of the binding table: `client` (the default, what resolving reads) or `full`."""
    raw = request.args.get("view")
    if raw is None:
        return "client"
    if raw not in VIEWS:
        raise BadRequest(f"view: expected one of {', '.join(VIEWS)}, got {raw!r}", field="view")
    return raw


def bodies_arg() -> str:
    """`?bodies=` of the binding table: `inline` (the default) or `versions` (on demand)."""
    raw = request.args.get("bodies")
    if raw is None:
        return "inline"
    if raw not in BODY_MODES:
        raise BadRequest(f"bodies: expected one of {', '.join(BODY_MODES)}, got {raw!r}",
                         field="bodies")
    return raw
