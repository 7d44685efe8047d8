"""The `Idempotency-Key` header on binding writes: a retried move is applied once.

A caller (the CLI, the gatekeeper) that did not get an answer, say a 504
`outcome_unknown`, may send the same request again with the same key. If the
first one landed, the retry answers the record it produced (200, header
`Idempotent-Replayed: true`) instead of moving the role a second step or
failing its If-Match; if it did not land, the retry is applied normally. The
key is remembered per role for a day, together with a fingerprint of the
request (method, path, body), and stored in the same Lua step as the write it
names, so a write and its key are never apart. The same key with another
request answers 422 `idempotency_key_reused`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, g, request

from router.server.errors import BadRequest
from router.server.services import services_of

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_SAFE_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")

F = TypeVar("F", bound=Callable[..., Any])


def requested() -> tuple[str, str] | None:
    """(key, request fingerprint) when the request carries an Idempotency-Key, else None."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if _SAFE_KEY.fullmatch(raw) is None:
        raise BadRequest(f"{HEADER}: 1 to 128 of A-Z a-z 0-9 . _ : -", field=HEADER)
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.path.encode(), request.get_data(cache=True)):
        digest.update(part)
        digest.update(b"\0")
    return raw, digest.hexdigest()


def current() -> tuple[str, str] | None:
    """This request's (key, fingerprint), for the store's write (set by `idempotent`)."""
    found: tuple[str, str] | None = g.get("idempotency")
    return found


def idempotent(render: Callable[[Any], Any]) -> Callable[[F], F]:
    """Answer a replayed Idempotency-Key with `render(record)` before running the view."""

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapped(role: str, *args: Any, **kwargs: Any) -> Any:
            idempotency = requested()
            g.idempotency = idempotency
            if idempotency is not None:
                store = services_of(current_app).store
                record = store.replay(role, *idempotency)
                if record is not None:
                    response, status = render(record)
                    response.headers[REPLAYED_HEADER] = "true"
                    return response, status
            return view(role, *args, **kwargs)

        return wrapped  # type: ignore[return-value]

    return decorate
