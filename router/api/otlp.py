"""POST /v1/traces with OTLP bodies: spans in, one run per trace id, ingested when its root ends.

`router.api.traces` hands a request here when its body is OTLP: Content-Type
`application/x-protobuf` (an `ExportTraceServiceRequest`, gzip or deflate
Content-Encoding allowed) or a JSON body with `resourceSpans`. Spans are grouped
by trace id. A trace whose root span (no parent) is in the request is complete:
its spans from earlier batches are taken out of Redis (`PendingSpans`), the run is
assembled (`rolegate.spans.assemble`) and goes through the same placing,
checking, storing and tripwire as trace JSON (`router.api.traces.store_traces`,
handed in by the caller so the two modules do not import each other);
its run id is the trace id (or `rolegate.run_id`), so a retried export is stored
once. Spans of a trace whose root has not arrived wait in Redis; if they name
their run's role, config and arm (on the span, its resource, or an earlier span
of the run) and one is an `execute_tool` span of a tool the role forbids on a
candidate or shadow arm, the role is rolled back now, not when the run ends.

The answer is OTLP's `ExportTraceServiceResponse` in the request's encoding,
with `partialSuccess` counting the spans refused (a run that cannot be placed or
is invalid, spans over the pending bounds) and saying why. A refused export
(not OTLP at all, no token, over quota, Redis unavailable) is a 4xx/5xx whose
body is a protobuf `google.rpc.Status` when the request was protobuf, as
OTLP/HTTP prescribes (`router.server.otlp_status`), else rolegate's JSON error shape.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Request, current_app, g, request
from flask.typing import ResponseReturnValue
from pydantic import ValidationError
from werkzeug.exceptions import RequestEntityTooLarge

from bindings.errors import NotFound
from gatekeeper import tripwire
from gatekeeper.checks.invariants import TraceVerdict, check
from gatekeeper.store.pending_spans import PendingSpans
from rolegate.spans import ARM, CONFIG, KEY, ROLE, RUN_ID, IncompleteRun, Span, assemble, placement
from rolegate.trace import Trace
from router.api import otlp_decode
from router.api.otlp_decode import PROTOBUF, BadOtlp
from router.api.trace_answers import MAY_BE_APPLIED
from router.app import Services
from router.server.errors import BadRequest
from router.server.services import services_of

#: Where router.api.traces.init_app keeps the app's PendingSpans.
EXTENSION = "rolegate.otlp_pending"
#: The partialSuccess message names at most this many reasons.
MAX_REASONS = 5
_MARKER = b'"resourceSpans"'


def otlp_body(req: Request) -> Any | None:
    """The request's OTLP body (bytes for protobuf, the parsed JSON), or None if not OTLP."""
    if req.mimetype == PROTOBUF:
        return _inflated(req)
    encoded = bool(req.headers.get("Content-Encoding"))
    raw = _inflated(req) if encoded else req.get_data(cache=True)
    if _MARKER not in raw:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None  # the trace-JSON path explains bad JSON
    return body if isinstance(body, dict) and "resourceSpans" in body else None


def _inflated(req: Request) -> bytes:
    limit = current_app.config.get("MAX_CONTENT_LENGTH") or 8 * 1024 * 1024
    try:
        return otlp_decode.inflate(req.get_data(cache=True),
                                   req.headers.get("Content-Encoding", ""), limit)
    except BadOtlp as exc:
        raise BadRequest(str(exc)) from exc
    except OverflowError:
        raise RequestEntityTooLarge(f"the decompressed body passes {limit} bytes") from None


#: One entry per trace of a request: a refusal (dict), a stored outcome (JSON text), or None.
Results = list[dict[str, Any] | str | None]
#: router.api.traces.store_traces: check, store and trip (index, trace) pairs into results.
StoreTraces = Callable[[list[tuple[int, Trace]], Results, float], tuple[int, list[dict[str, Any]]]]


def ingest(body: Any, store_traces: StoreTraces) -> ResponseReturnValue:
    """Take one OTLP export: complete the runs whose root arrived, keep the rest, answer OTLP."""
    protobuf = isinstance(body, bytes)
    try:
        spans = otlp_decode.from_protobuf(body) if protobuf else otlp_decode.from_json(body)
    except BadOtlp as exc:
        raise BadRequest(str(exc)) from exc
    now = time.time()
    services: Services = services_of(current_app)
    pending: PendingSpans = current_app.extensions[EXTENSION]
    rejected = 0
    reasons: list[str] = []
    early: list[dict[str, Any]] = []
    runs: list[tuple[Trace, int]] = []
    for trace_id, group in _by_trace(spans).items():
        if not any(not span.parent_id for span in group):
            where = _placement(group)
            early += _trip_on_arrival(services, trace_id, group,
                                      {**pending.placement(trace_id), **where}, now)
            over = pending.add(trace_id, group, where, now)
            request.environ[MAY_BE_APPLIED] = True  # kept: a later failure is no 503
            if over:
                rejected += over
                reasons.append(f"trace {trace_id}: {over} span(s) over the pending-run bounds")
            continue
        taken = pending.take(trace_id)
        if taken.spans:
            request.environ[MAY_BE_APPLIED] = True  # taken out of Redis: no 503 after this
        try:
            runs.append((Trace.model_validate(assemble(taken.spans + group,
                                                       fallback=taken.placement)), len(group)))
        except (IncompleteRun, ValidationError) as exc:
            rejected += len(group)
            reasons.append(f"trace {trace_id}: {_reason(exc)}")
    results: Results = [None] * len(runs)
    _, trips = store_traces([(i, trace) for i, (trace, _) in enumerate(runs)], results, now)
    for (trace, count), result in zip(runs, results):
        if isinstance(result, dict):
            rejected += count
            reasons.append(f"run {trace.run_id}: {result['error']['message']}")
    g.tripwire = early + trips
    shown = reasons[:MAX_REASONS] + ([f"and {len(reasons) - MAX_REASONS} more"]
                                     if len(reasons) > MAX_REASONS else [])
    answer, mimetype = otlp_decode.response(rejected, "; ".join(shown), protobuf=protobuf)
    return current_app.response_class(answer, mimetype=mimetype)


def _by_trace(spans: Iterable[Span]) -> dict[str, list[Span]]:
    groups: dict[str, list[Span]] = {}
    for span in spans:
        groups.setdefault(span.trace_id, []).append(span)
    return groups


def _placement(group: list[Span]) -> dict[str, str]:
    """Placement attributes named by any span of the group (or its resource), first wins."""
    found: dict[str, str] = {}
    for span in group:
        for name, value in placement(span.attributes, span.resource).items():
            found.setdefault(name, value)
        run_id = span.attributes.get(RUN_ID)
        if isinstance(run_id, str) and run_id:
            found.setdefault(RUN_ID, run_id)
    return found


def _trip_on_arrival(services: Services, trace_id: str, group: list[Span],
                     where: dict[str, str], now: float) -> list[dict[str, Any]]:
    """Roll back now if a tool span of a placed candidate/shadow run calls a forbidden tool."""
    tools = [span.tool for span in group if span.tool]
    if not tools or not all(name in where for name in (ROLE, CONFIG, ARM)):
        return []
    try:
        partial = Trace.model_validate({
            "run_id": where.get(RUN_ID, trace_id), "role": where[ROLE],
            "config": where[CONFIG], "arm": where[ARM], "key": where.get(KEY, ""),
            "tools": tools, "stamps": dict.fromkeys(
                ("agent_version", "instruction_hash", "model_id", "tool_schema_hash"),
                "unknown")})
        # Read from Redis, not this worker's copy: a trip must see the binding as it is.
        record = services.store.get(partial.role)
    except (ValidationError, NotFound):
        return []  # the completed run is refused with the reason
    # Only the forbidden calls count here: a required tool may still come later in the run.
    forbidden = check(partial, record.binding.gate.invariants).forbidden
    verdict = TraceVerdict(passed=not forbidden, forbidden=forbidden)
    if not tripwire.applies(partial, verdict):
        return []
    fired = tripwire.trip(services.store, partial, verdict, now)
    if fired is None:
        return []
    services.cache.put(fired.record)
    return [{"role": partial.role, "run_id": fired.run_id, "tools": list(fired.tools),
             "required_lost": [], "version": fired.record.version,
             "stage": fired.record.binding.stage.value}]


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        return f"{field}: {first.get('msg', 'invalid')}" if field else str(first.get("msg"))
    return str(exc)
