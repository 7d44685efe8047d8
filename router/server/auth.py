"""Who is calling, and may they: bearer tokens with scopes and role lists.

Scopes: caller (resolve, read, report traces), reviewer (also feedback),
gatekeeper (also promote and rollback), operator (everything). A token may be
limited to some roles (`router.server.tokens`): every view with a `role` in its
URL refuses other roles with 403, and the views that list or take many roles
filter or refuse each one with `may_act_on`.

An open server (no tokens configured) treats every request as an operator
named `anonymous`, except a request that says it comes from the gatekeeper
process (`X-Rolegate-Actor: gatekeeper`, sent by `rolegate gatekeeper`): its
moves are recorded and counted as the gatekeeper's. Declaring it grants
nothing an open server does not already grant; with tokens set the header is
ignored and the token alone decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, g, request

from router.server import access
from router.server.access import ACTOR_HEADER, OPEN_GATEKEEPER, OPEN_OPERATOR
from router.server.services import services_of
from router.server.tokens import SCOPES, Principal, TokenTable

__all__ = ["ACTOR_HEADER", "OPEN_GATEKEEPER", "OPEN_OPERATOR", "SCOPES", "Principal",
           "TokenTable", "actor", "authenticate", "may_act_on", "principal", "require",
           "require_role"]

F = TypeVar("F", bound=Callable[..., Any])


def authenticate() -> Principal:
    """The caller of this request, or Unauthorized (`router.server.access.identify`)."""
    table: TokenTable = services_of(current_app).tokens
    return access.identify(table, request.headers.get("Authorization", ""),
                           request.headers.get(ACTOR_HEADER, ""))


def bearer_token() -> str | None:
    """The token in this request's Authorization header, or None."""
    return access.bearer(request.headers.get("Authorization", ""))


def require(*scopes: str) -> Callable[[F], F]:
    """Allow the view to tokens of `scopes` (operator is always allowed).

    A view with a `role` URL argument is also refused to a token limited to
    other roles. The decision is `router.server.access`'s, as the fast paths'.
    """
    allowed = access.allowed_scopes(scopes)

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            found = authenticate()
            access.permit_scope(found, allowed)
            g.principal = found
            role = kwargs.get("role")
            if isinstance(role, str):
                access.permit_role(found, role)
            return view(*args, **kwargs)

        # Read by the scopes table (docs/scopes.md, `router.openapi.scopes`): the one
        # source of which scope may call which route.
        wrapped.required_scopes = allowed  # type: ignore[attr-defined]
        return wrapped  # type: ignore[return-value]

    return decorate


def principal() -> Principal:
    """The authenticated caller of this request (authenticated now if no view did yet)."""
    found: Principal | None = g.get("principal")
    if found is None:
        found = g.principal = authenticate()
    return found


def may_act_on(role: str) -> bool:
    """Whether this request's token may resolve, read and report for `role`."""
    return principal().may(role)


def require_role(role: str) -> None:
    """Forbidden unless this request's token may act on `role`."""
    access.permit_role(principal(), role)


def actor() -> str:
    """The name of the authenticated caller of this request."""
    return principal().name
