"""Bearer tokens with scopes: caller, gatekeeper, operator (operator may do everything).

`ROLEGATE_TOKENS="token:scope,token:scope"`; an entry may carry a name,
`alice=token:operator`, which is what history records as the actor. Unnamed
tokens are named by scope and a short hash, never by the token itself.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import current_app, g, request

from router.server.errors import Forbidden, Unauthorized

SCOPES = ("caller", "gatekeeper", "operator")
#: "name=rest", where rest must not itself start with "=" (base64 padding).
_NAMED = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*)=([^=].*)$")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Principal:
    """Who is calling: the actor's name and the token's scope."""

    name: str
    scope: str


def parse_tokens(spec: str) -> list[tuple[bytes, Principal]]:
    """Parse ROLEGATE_TOKENS; raise ValueError naming a bad entry (never its token)."""
    entries: list[tuple[bytes, Principal]] = []
    for index, raw in enumerate(part.strip() for part in spec.split(",")):
        if not raw:
            continue
        named = _NAMED.match(raw)
        name, rest = (named.group(1), named.group(2)) if named else ("", raw)
        token, sep, scope = rest.rpartition(":")
        if not sep or not token or scope not in SCOPES:
            raise ValueError(
                f"ROLEGATE_TOKENS entry {index + 1} must be token:scope with scope one of "
                f"{', '.join(SCOPES)}"
            )
        if not name:
            name = f"{scope}-{hashlib.sha256(token.encode()).hexdigest()[:8]}"
        entries.append((token.encode(), Principal(name=name, scope=scope)))
    return entries


class TokenTable:
    """Looks a presented token up in constant time per entry."""

    def __init__(self, spec: str | None) -> None:
        self.open = spec is None
        self.entries = parse_tokens(spec) if spec else []

    def lookup(self, presented: str) -> Principal | None:
        """The principal owning `presented`, comparing every entry in constant time."""
        found: Principal | None = None
        candidate = presented.encode()
        for token, principal in self.entries:
            # No early exit: timing must not tell how many entries were tried.
            if hmac.compare_digest(token, candidate):
                found = principal
        return found


def authenticate() -> Principal:
    """The caller of this request, or Unauthorized."""
    table: TokenTable = current_app.extensions["rolegate"].tokens
    if table.open:
        return Principal(name="anonymous", scope="operator")
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    principal = table.lookup(presented.strip())
    if principal is None:
        raise Unauthorized("unknown token")
    return principal


def require(*scopes: str) -> Callable[[F], F]:
    """Allow the view to tokens of `scopes` (operator is always allowed)."""
    allowed = frozenset(scopes) | {"operator"}

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            principal = authenticate()
            if principal.scope not in allowed:
                raise Forbidden(
                    f"a {principal.scope} token may not call this; it needs one of "
                    f"{', '.join(sorted(allowed))}",
                    scope=principal.scope,
                )
            g.principal = principal
            return view(*args, **kwargs)

        return wrapped  # type: ignore[return-value]

    return decorate


def actor() -> str:
    """The name of the authenticated caller of this request."""
    principal: Principal = g.principal
    return principal.name
