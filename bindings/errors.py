"""Exceptions raised by the binding table and the packages built on it.

`RolegateError` and `NotFound` come from the caller SDK (`rolegate.errors`).

Each carries the HTTP status it maps to (like h11's `error_status_hint`), so the
router renders every one of them with a single handler::

    RolegateError                 500  base; never raised directly
    ├── InvalidInput              422  a value broke a model invariant
    ├── NotFound                  404  no such role, version or run
    ├── Conflict                  409  the version you read is no longer current
    │   └── IllegalTransition     409  the stage machine refuses this move
    ├── Archived                  410  the role was archived (the details say why)
    ├── PreconditionRequired      428  replacing a binding without If-Match
    ├── IdempotencyKeyReused      422  an Idempotency-Key sent again with another request
    ├── StoreUnavailable          503  Redis did not answer; nothing was written
    │   └── StoreRefused          503  Redis refused: details.condition OOM, READONLY, BUSY, ...
    ├── OutcomeUnknown            504  a write was sent but no answer came: it may have landed
    │   └── ReplicationTimeout    504  on the primary, fewer replicas than ROLEGATE_MIN_REPLICAS
    │                                  confirmed it: it may not survive a failover
    └── CorruptRecord             500  a stored record no longer reads as its model
"""

from __future__ import annotations

from typing import Any

# The base and NotFound are the caller SDK's, so a client and the service raise
# the same classes.
from rolegate.errors import NotFound, RolegateError

__all__ = ["Conflict", "CorruptRecord", "IdempotencyKeyReused", "IllegalTransition",
           "InvalidInput", "NotFound", "OutcomeUnknown", "PreconditionRequired",
           "ReplicationTimeout", "RolegateError", "StoreRefused", "StoreUnavailable"]


class InvalidInput(RolegateError):
    """A value broke a model invariant or the request's shape."""

    status = 422
    code = "invalid"


class Conflict(RolegateError):
    """A compare-and-set lost: `details["current_version"]` says what is current."""

    status = 409
    code = "conflict"


class IllegalTransition(Conflict):
    """The stage machine refuses the requested move; nothing was changed."""

    code = "illegal_transition"


class Archived(RolegateError):
    """The role was archived: it still has its history, but nothing resolves or moves it."""

    status = 410
    code = "archived"


class PreconditionRequired(RolegateError):
    """Replacing an existing binding needs the version the writer read."""

    status = 428
    code = "precondition_required"


class IdempotencyKeyReused(RolegateError):
    """An Idempotency-Key already used for a different request on this role."""

    status = 422
    code = "idempotency_key_reused"


class StoreUnavailable(RolegateError):
    """The Redis server did not answer; a write was not applied."""

    status = 503
    code = "store_unavailable"


class StoreRefused(StoreUnavailable):
    """Redis answered with a refusal; `details["condition"]` names it (OOM, READONLY, ...).

    Redis checks these before it runs a command (or a script's first write), so
    nothing was applied: like any 503, retrying later is safe. The code stays
    `store_unavailable` (what callers already handle); the condition is added.
    """


class OutcomeUnknown(RolegateError):
    """A write reached Redis but its answer did not come back: it may or may not have landed.

    Read the record back before retrying (or retry with the same Idempotency-Key).
    """

    status = 504
    code = "outcome_unknown"


class ReplicationTimeout(OutcomeUnknown):
    """A change reached the primary but not enough replicas in time: it may not survive a failover.

    Not a 503: a 503 means "not applied", and this change is applied on the
    primary; whether it outlives the primary is what nobody knows yet. So it is
    a 504 `outcome_unknown` like any other write whose fate is open (read the
    role back before retrying), with `details.condition` "replication_timeout"
    saying why. (Issue 16 first shipped it as 503 `replication_timeout`.)
    """

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, condition="replication_timeout", **details)


class CorruptRecord(RolegateError):
    """A record in Redis does not validate: written by other software, or a bug."""

    status = 500
    code = "corrupt_record"
