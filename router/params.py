"""Reading path parameters and headers: the value, or a 400 naming what is wrong with it."""

from __future__ import annotations

from flask import request

from bindings.models import validate_role_name
from router.errors import BadRequest


def role_param(role: str) -> str:
    """`role` from a URL path if it is a usable role name, else BadRequest."""
    try:
        return validate_role_name(role)
    except ValueError as exc:
        raise BadRequest(str(exc), field="role") from None


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
