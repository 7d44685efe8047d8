"""The errors a caller of the SDK sees; the service's error tree builds on them.

Each carries the HTTP status it maps to, so the router renders the service's
errors (`bindings.errors`, which subclasses `RolegateError`) with one handler::

    RolegateError        500  base; never raised directly
    ├── NotFound         404  no such role, version or run
    ├── SnapshotTooOld   503  the client's snapshot is older than max_age
    ├── SnapshotUnavailable 503  the client has no snapshot (yet): no answer, no bootstrap
    └── InvalidToken     401  a token that cannot be sent (also a ValueError); never quoted
"""

from __future__ import annotations

from typing import Any


class RolegateError(Exception):
    """Base of every rolegate error; `status`, `code` and `details` feed the API."""

    status = 500
    code = "internal"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(RolegateError):
    """The named role, version or record does not exist."""

    status = 404
    code = "not_found"


class SnapshotTooOld(RolegateError):
    """The router has not confirmed the snapshot for longer than `max_age` seconds."""

    status = 503
    code = "snapshot_too_old"


class SnapshotUnavailable(RolegateError):
    """The client has no snapshot: the router did not answer and no bootstrap was given."""

    status = 503
    code = "snapshot_unavailable"


class BodyUnavailable(RolegateError):
    """A config body the answer must carry could not be fetched (`rolegate.body_cache`).

    The client fetches a body the first time a resolve needs it; when the router
    cannot give it then, the resolve raises this rather than answer without it.
    """

    status = 503
    code = "body_unavailable"


class InvalidToken(RolegateError, ValueError):
    """A bearer token with a space or control character inside: it cannot be sent.

    Raised before any request; the message says where the bad character is and
    never quotes the token.
    """

    status = 401
    code = "invalid_token"
