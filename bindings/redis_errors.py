"""redis-py's exceptions turned into rolegate's, so the API can say what happened.

- The command never reached Redis (connection refused, a connect timeout):
  StoreUnavailable, a 503, "not applied".
- Redis answered with a refusal it checks before running anything: out of
  memory, a read-only replica after a failover, too few replicas, busy with a
  script, still loading, ...: StoreRefused, a 503 `store_unavailable` naming
  the condition in its message and `details.condition`.
- In `write_errors` only: the write was sent but the answer never came (a read
  timeout, the connection dropped mid-answer): OutcomeUnknown, a 504. A 503
  therefore always means "not applied".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

import redis

from bindings.errors import OutcomeUnknown, StoreRefused, StoreUnavailable

#: Refusals Redis answers before it applies anything, by their error prefix.
CONDITIONS = frozenset({"OOM", "READONLY", "NOREPLICAS", "BUSY", "MISCONF", "LOADING",
                        "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOTBUSY"})
#: redis-py strips the prefix of these and raises its own class instead.
_CLASSES: tuple[tuple[type[Exception], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
)


#: No answer at all: the connection, or a Cluster client that found no node for the key.
_UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ClusterError)


def refusal_condition(exc: BaseException) -> str | None:
    """The Redis condition `exc` reports (OOM, READONLY, NOREPLICAS, BUSY, ...), or None."""
    for cls, condition in _CLASSES:
        if isinstance(exc, cls):
            return condition
    if isinstance(exc, redis.ResponseError):
        word = str(exc).split(" ", 1)[0]
        return word if word in CONDITIONS else None
    return None


def never_sent(exc: BaseException) -> bool:
    """True when a connection error happened before the command could be sent.

    Connect failures say so in their message; a circuit breaker failing fast
    (router.server.breaker) says "nothing was sent".
    """
    text = str(exc)
    return "connecting to" in text or "Timeout connecting" in text or "nothing was sent" in text


#: What each condition means, for the message.
_MEANING = {"OOM": "Redis is full and refuses writes", "READONLY": "Redis is a read-only replica",
            "NOREPLICAS": "Redis has too few replicas to accept writes",
            "BUSY": "Redis is busy running a script"}


def _refused(exc: BaseException) -> StoreRefused | None:
    condition = refusal_condition(exc)
    if condition is None:
        return None
    meaning = _MEANING.get(condition, "Redis refused the command")
    return StoreRefused(f"{meaning} ({condition}): {exc}; nothing was applied",
                        condition=condition)


class redis_errors:
    """Reads (and writes whose outcome a retry cannot change): every failure is a 503."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            return
        refused = _refused(exc)
        if refused is not None:
            raise refused from exc
        if isinstance(exc, _UNAVAILABLE):
            raise StoreUnavailable(f"Redis did not answer: {exc}") from exc


class write_errors(redis_errors):
    """A write: a failure after the command was sent is a 504 outcome_unknown, not a 503."""

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if (exc is not None and _refused(exc) is None
                and isinstance(exc, (redis.ConnectionError, redis.TimeoutError))
                and not never_sent(exc)):
            raise OutcomeUnknown(
                f"the write was sent but Redis did not answer ({exc}): it may or may not "
                "have been applied; read the record back before retrying") from exc
        super().__exit__(exc_type, exc, tb)


@contextmanager
def partly_applied(applied: bool) -> Iterator[None]:
    """With `applied` (an earlier step of the same request landed), a 503 becomes a 504.

    A 503 says nothing was applied; after a step that was, a failure leaves the
    request's outcome open (trace ingest is idempotent: sending it again is safe).
    """
    try:
        yield
    except StoreUnavailable as exc:
        if not applied:
            raise
        raise OutcomeUnknown(f"part of the request was stored, then Redis failed: "
                             f"{exc.message}; send it again", **exc.details) from exc
