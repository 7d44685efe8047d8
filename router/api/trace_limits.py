"""Limits on a trace ingest request beyond its size: depth, the token's roles and quota.

The fast path parses a batch straight into Trace models with pydantic-core,
whose JSON parser nests up to about 200 levels: this puts the body back under
the same 64-level limit every other body has (router.api.bodies.MAX_DEPTH).
Only the free-form fields (input, feedback, a step's args and result) can
nest; every other level of a trace body is fixed by the schema.
"""

from __future__ import annotations

from typing import Any

import redis

from bindings.connection import Connection
from bindings.errors import StoreUnavailable
from rolegate.trace import Trace
from router.api.bodies import MAX_DEPTH, depth
from router.server.errors import BadRequest, QuotaExceeded
from router.server.quota import Quota, Refusal, charge
from router.server.tokens import Principal

#: Bodies larger than this are validated off the worker's loop (router.server.offload).
OFF_LOOP_BYTES = 256 * 1024


def body_prefix(raw: bytes) -> int:
    """How many levels sit above each trace in this body."""
    body = raw.lstrip()
    if body[:1] == b"[":
        return 1
    return 2 if body[1:].lstrip().startswith(b'"traces"') else 0


def refuse_deep(traces: list[Trace], raw: bytes) -> None:
    """BadRequest if the body these traces came from nests deeper than MAX_DEPTH."""
    # Only free-form values can nest, and most batches carry none: then the body's
    # brackets are not counted either (two passes over a 100-trace body: 34 us).
    free = [trace for trace in traces
            if trace.input is not None or trace.feedback is not None or trace.steps]
    if not free or raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return  # nothing can nest, or not deeper than the body has brackets
    prefix = body_prefix(raw)
    for trace in free:
        # The trace object is one level; its fields' values start one below it.
        values: list[tuple[int, Any]] = [(prefix + 1, trace.input), (prefix + 1, trace.feedback)]
        # steps (a list) -> a step (an object) -> its args / result.
        values.extend((prefix + 3, value) for step in trace.steps or ()
                      for value in (step.args, step.result))
        for base, value in values:
            if isinstance(value, dict | list) and base + depth(value) > MAX_DEPTH:
                raise BadRequest(f"request body nests deeper than {MAX_DEPTH} levels")


def charge_quota(connection: Connection, quota: Quota, name: str, traces: int,
                 size: int) -> None:
    """Count this request against token `name`'s quota; QuotaExceeded (429) when over it."""
    try:
        refusal = charge(connection, quota, name, traces, size)
    except redis.RedisError as exc:
        raise StoreUnavailable(f"Redis did not answer: {exc}") from None
    if refusal is not None:
        raise quota_exceeded(refusal)


def quota_exceeded(refusal: Refusal) -> QuotaExceeded:
    """The 429 of a request over its token's quota (the error handler adds Retry-After)."""
    return QuotaExceeded(refusal.message, limit=refusal.limit, used=refusal.used,
                         what=refusal.what, retry_after_s=refusal.retry_after_s)


def in_scope(valid: list[tuple[int, Trace]], results: list[dict[str, Any] | str | None],
             reporter: Principal, now: float | None = None) -> list[tuple[int, Trace]]:
    """The traces `reporter` may report, stamped with its name; a refusal for each other one.

    With `now`, a trace that says no `time` is stamped with it in the same copy (one
    pydantic copy per trace, not two: a batch pays it per trace).

    An out-of-scope trace is refused before anything about its role is read or
    changed: no binding lookup, no store, no tripwire.
    """
    kept: list[tuple[int, Trace]] = []
    for index, trace in valid:
        if not reporter.may(trace.role):
            results[index] = {
                "index": index, "run_id": trace.run_id, "status": "refused",
                "error": {"code": "forbidden",
                          "message": f"token {reporter.name!r} may not report for role "
                                     f"{trace.role!r}",
                          "details": {"role": trace.role}}}
            continue
        if trace.reporter == reporter.name and trace.time is not None:
            kept.append((index, trace))  # stamped as it was validated (`Trace`'s STAMP)
            continue
        # Who reported it is the server's word, never the body's.
        stamp: dict[str, Any] = {"reporter": reporter.name}
        if now is not None and trace.time is None:
            stamp["time"] = now
        kept.append((index, trace.model_copy(update=stamp)))
    return kept
