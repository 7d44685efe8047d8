"""One access decision for every way a request comes in: Flask's hooks and the WSGI fast paths.

Who is calling (the bearer token, or on an open server the declared actor),
whether their scope and role list allow the call, and whether the Host is one
this router serves: each decided here once, from plain header values, so the
Flask decorators (`router.server.auth`), the Host hook (`router.server.hosts`)
and the fast paths in front of Flask (`router.api.resolve_fast`, `ingest_fast`,
`ofrep_fast`) cannot drift apart. A refusal is an exception carrying its HTTP
status (`Unauthorized`, `Forbidden`, `HostNotAllowed` from `hosts.check`); Flask renders it, and a
fast path that meets one hands the request to Flask, which decides the same
and answers with its one error shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from router.server import hosts
from router.server.errors import Forbidden, Unauthorized
from router.server.tokens import Principal, TokenTable

#: The header the gatekeeper process sends, honoured only on an open server.
ACTOR_HEADER = "X-Rolegate-Actor"
OPEN_GATEKEEPER = Principal(name="gatekeeper", scope="gatekeeper")
OPEN_OPERATOR = Principal(name="anonymous", scope="operator")
#: The same headers as WSGI environ keys, for the fast paths.
_ENV_AUTHORIZATION = "HTTP_AUTHORIZATION"
_ENV_ACTOR = "HTTP_" + ACTOR_HEADER.upper().replace("-", "_")


def bearer(authorization: str) -> str | None:
    """The token in an Authorization header value, or None."""
    scheme, _, presented = authorization.partition(" ")
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented:
        return None
    return presented


def identify(tokens: TokenTable, authorization: str, declared_actor: str) -> Principal:
    """The caller: the bearer token's principal (open: the declared actor); else Unauthorized."""
    if tokens.open:
        return OPEN_GATEKEEPER if declared_actor == "gatekeeper" else OPEN_OPERATOR
    presented = bearer(authorization)
    if presented is None:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    found = tokens.lookup(presented)
    if found is None:
        raise Unauthorized("unknown token")
    return found


def allowed_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """A view's scopes with operator, which is always allowed."""
    return frozenset(scopes) | {"operator"}


def permit_scope(found: Principal, allowed: frozenset[str]) -> None:
    """Forbidden unless `found`'s scope is one of `allowed`."""
    if found.scope not in allowed:
        raise Forbidden(f"a {found.scope} token may not call this; it needs one of "
                        f"{', '.join(sorted(allowed))}", scope=found.scope)


def permit_role(found: Principal, role: str) -> None:
    """Forbidden unless `found` may act on `role`."""
    if not found.may(role):
        raise Forbidden(f"token {found.name!r} may not act on role {role!r}; it is limited to "
                        f"{', '.join(sorted(found.roles or ()))}", role=role)


def admit(environ: Mapping[str, Any], tokens: TokenTable, allowed_hosts: tuple[str, ...],
          scopes: frozenset[str], role: str | None = None) -> Principal:
    """For a fast path: the caller the Flask app would let through, from the WSGI environ.

    Host, identity, scope and (when given) role, decided as the Flask hooks and
    decorators decide them; the same exceptions when they would refuse.
    """
    hosts.check(environ.get("HTTP_HOST"), environ.get("PATH_INFO", ""),
                environ.get("SERVER_NAME", ""), allowed_hosts)
    found = identify(tokens, environ.get(_ENV_AUTHORIZATION, ""), environ.get(_ENV_ACTOR, ""))
    permit_scope(found, scopes)
    if role is not None:
        permit_role(found, role)
    return found
