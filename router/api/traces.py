"""POST /v1/traces: report agent runs; each is checked, stored once, and may trip the wire.

An OTLP body (protobuf, or JSON with `resourceSpans`) is OpenTelemetry spans
instead, handled by router.api.otlp; what follows is about trace JSON. Plain
trace JSON (the POST every agent run ends with, the SDK's batches) is stored in
front of Flask by router.api.ingest_fast, with the same checks and answer (a
batch through this module's `store_batch`); whatever it does not store itself it
hands to this view.

The body is one trace, or `{"traces": [...]}` (a bare JSON list is taken too).
Each trace is validated on its own: a bad one is refused with its index and the
reason while the good ones in the same batch are kept. Answers:

- 200: every trace accepted (a `duplicate` — a retried run_id — counts as accepted:
  it was stored before and is not counted again);
- 207: some refused, some accepted (the body says which);
- 422: all refused; the body is the usual `{"error": ...}` plus the same `results`
  (a trace holding NaN, Infinity or an unpaired surrogate escape is refused on its own);
- 400: the body is not JSON (or nests too deep), or is neither a trace nor a
  batch (empty, over router.api.trace_parse.MAX_BATCH);
- 409: the tripwire lost its compare-and-set every time (the traces are stored;
  retrying the same request trips it again, since a retried run_id stored in this
  stage still counts); 503: Redis did not answer and nothing was stored; 504
  `outcome_unknown`: a send's answer never came, or some traces were stored before
  Redis failed (sending the same request again is safe: a stored run_id answers
  `duplicate`).

A trace counts in the stage of the role's binding as Redis holds it when the
trace is written, not as this worker's copy (refreshed every 0.2 s) last saw
it: the store refuses a write checked against an older binding version, and
the traces are checked again against the binding read from Redis. A trace whose
config is neither the role's current nor its candidate is refused
(`config_not_bound`): it would count in no arm.

Each result is ``{"index", "run_id", "status": "accepted"|"duplicate"|"refused",
"verdict"?, "error"?}``. The top level adds counts and `tripwire`, the rollbacks
this request caused. A candidate or shadow trace with a zero-tolerance breach
rolls the role back before the answer is sent, and this worker serves the
rolled-back binding at once (other workers within their refresh interval).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Flask, current_app, g, jsonify, request
from flask.typing import ResponseReturnValue

from bindings.errors import NotFound
from bindings.models import VersionedBinding, validate_role_name
from gatekeeper import tripwire
from gatekeeper.checks.invariants import Policy, policy_of
from gatekeeper.store.pending_spans import PendingSpans
from gatekeeper.store.trace_ingest import Charge, Checked, Moved, OverQuota, Stored
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import TraceStore
from gatekeeper.store.unit_events import UnitRules
from rolegate.trace import Trace
from router.api import ingest_fast, otlp
from router.api.bodies import SURROGATE_ESCAPE, json_body
from router.api.judge_sampling import offer_sampled
from router.api.trace_answers import (
    EXTENSION,
    MAY_BE_APPLIED,
    MINIMAL,
    QUOTA_COUNTED,
    answer_text,
    bound,
    honest_outcome,
    note_clash,
    stored_result,
    wants_minimal,
)
from router.api.trace_bindings import NOT_BOUND, RequestBindings, not_bound
from router.api.trace_limits import (
    OFF_LOOP_BYTES,
    charge_quota,
    in_scope,
    quota_exceeded,
    refuse_deep,
)
from router.api.trace_parse import (
    batch_items,
    item_refusal,
    parse_all_valid,
    parse_each,
)
from router.app import Services
from router.server.auth import principal, require
from router.server.errors import QuotaExceeded
from router.server.offload import off_loop
from router.server.quota import Refusal, refusal, script_charge
from router.server.services import services_of
from router.server.tokens import Principal

bp = Blueprint("traces", __name__)

#: Reads of a role's binding per request when it keeps moving while traces are stored.
MOVE_ATTEMPTS = 4


def init_app(app: Flask) -> None:
    """Give the app a TraceStore (with the configured retention) and the OTLP pending spans."""
    services = services_of(app)
    # The store's kept connections skip the pool, and so its breaker hook: it is passed on.
    guard = services.breaker
    app.extensions[EXTENSION] = TraceStore(services.redis,
                                           retention=services.settings.trace_retention,
                                           run_ttl_s=services.settings.run_id_ttl_s,
                                           before_command=guard.before if guard else None)
    app.extensions[otlp.EXTENSION] = PendingSpans(services.redis)
    # In front of Flask (behind the resolve fast path): plain trace JSON is stored there,
    # through the view's own store_batch.
    ingest_fast.init_app(app, store_batch)


def trace_store(app: Flask | None = None) -> TraceStore:
    """The app's TraceStore (the current app's when `app` is None)."""
    found: TraceStore = (app or current_app).extensions[EXTENSION]
    return found


@bp.post("/v1/traces")
@require("caller", "gatekeeper")
def ingest() -> ResponseReturnValue:
    """Validate, check, store and (on a breach) trip; answer each trace's outcome."""
    with honest_outcome(request.environ):
        spans = otlp.otlp_body(request)
        if spans is not None:
            return otlp.ingest(spans, store_traces)
        return _ingest_json()


def _ingest_json() -> ResponseReturnValue:
    """The trace JSON body: one trace or a batch."""
    raw = request.get_data(cache=True)
    now = time.time()
    # Who reported each trace (the server's word) and its time where it gives none, set as
    # it is validated: `in_scope` then copies none.
    stamp = {"reporter": principal().name, "time": now}
    # A big batch's validation is pure and long (10,000 traces: most of a second
    # of CPU), which under a gevent worker would hold every resolve it serves.
    fast = (off_loop(parse_all_valid, raw, stamp) if len(raw) > OFF_LOOP_BYTES
            else parse_all_valid(raw, stamp))
    if fast is not None:
        refuse_deep(fast, raw)
        results: list[dict[str, Any] | str | None] = [None] * len(fast)
        valid = list(enumerate(fast))
    else:
        # Not strict: a NaN or an unpaired surrogate refuses its own trace, not the batch.
        items = batch_items(json_body(allow_empty=False, strict=False))
        results = [None] * len(items)
        valid = parse_each(items, results,
                           check_values=SURROGATE_ESCAPE.search(raw) is not None, stamp=stamp)
    minimal = wants_minimal(request.headers.get("Prefer"))
    duplicates, trips = store_traces(valid, results, now, minimal=minimal)
    answer = answer_text(results, duplicates, trips, minimal)
    if answer is None:
        return _all_refused([r for r in results if isinstance(r, dict)], trips)
    status, text = answer
    response = current_app.response_class(text, status=status, mimetype="application/json")
    if minimal:
        response.headers["Preference-Applied"] = MINIMAL
    return response


def store_traces(valid: list[tuple[int, Trace]], results: list[dict[str, Any] | str | None],
                 now: float, *, minimal: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """`store_batch` for this Flask request; leaves what was stored and tripped on `g`
    for the metrics and log hooks. The OTLP path (router.api.otlp) sends its
    assembled runs through here too."""
    ctx = g._get_current_object()  # one proxy lookup for both attributes
    duplicates, trips, ctx.ingested = store_batch(
        current_app, request.environ, principal(), len(request.get_data(cache=True)),
        valid, results, now, minimal=minimal)
    ctx.tripwire = trips
    return duplicates, trips


def store_batch(app: Flask, environ: dict[str, Any], reporter: Principal, size: int,
                valid: list[tuple[int, Trace]], results: list[dict[str, Any] | str | None],
                now: float, *, minimal: bool = False,
                ) -> tuple[int, list[dict[str, Any]], list[tuple[str, str]]]:
    """Check, store and trip each (request index, trace) of `valid`, filling `results` by index.

    The view and the ingest fast path (router.api.ingest_fast) both store through
    here. `size`: the body's bytes as received (trace JSON or OTLP spans), counted
    before anything is stored. Returns the duplicates (retried run_ids), the
    rollbacks the traces caused and the (role, arm) of each trace newly stored.
    `minimal` (the compact answer): a stored trace that tripped nothing gets ""
    (counted, never shown) instead of its result's JSON text.
    """
    services = services_of(app)
    store: TraceStore = app.extensions[EXTENSION]
    counted = environ.get(QUOTA_COUNTED)
    if isinstance(counted, Refusal):
        raise quota_exceeded(counted)  # the fast path's script call went over the quota
    if isinstance(counted, QuotaExceeded):
        raise counted  # the fast path's batch went over the quota
    # Counted by the store's first script (one round trip for the whole POST, whatever
    # its groups: `gatekeeper.store.ingest_quota`); on a Redis Cluster, a round trip first.
    charge = (script_charge(services.quota, reporter.name, len(results), size, now)
              if store.takes_charge and counted is None else None)
    if charge is None and counted is None:
        charge_quota(services.redis, services.quota, reporter.name, len(results), size)
    valid = in_scope(valid, results, reporter, now)
    checked, stored, positions, charge = _check_and_store(valid, results, RequestBindings(services),
                                                          store, now, charge, environ)
    if charge is not None:
        # No trace reached the store (all refused): the request still counts.
        charge_quota(services.redis, services.quota, reporter.name, len(results), size)
    ingested: list[tuple[str, str]] = [(c.trace.role, c.trace.arm) for c, o in zip(checked, stored) if not o.duplicate]
    trips = _tripwire(checked, stored, now, services)
    duplicates = 0
    tripped = {trip["run_id"] for trip in trips}
    for index, item, outcome in zip(positions, checked, stored):
        duplicates += outcome.duplicate
        if outcome.clash:
            note_clash(item, outcome)
        # Serialized here, with the verdict text the store already built: a batch
        # answer holds one of these per trace, and jsonify would encode them again.
        # The compact answer shows only the traces that tripped: the others are counted.
        results[index] = ("" if minimal and item.trace.run_id not in tripped
                          else stored_result(index, item, outcome))
    fresh = [(c.trace, c.epoch) for c, o in zip(checked, stored) if not o.duplicate]
    if fresh:
        offer_sampled(app, fresh, now)
    return duplicates, trips, ingested


def _check(valid: list[tuple[int, Trace]], results: list[dict[str, Any] | str | None],
           bindings: RequestBindings, now: float,
           connection: Any = None) -> tuple[list[Checked], list[int]]:
    """Check each trace against its role's binding; record a refusal for each one refused."""
    checked: list[Checked] = []
    positions: list[int] = []
    # What depends on the role or its binding alone is worked out once per request, not
    # per trace: a batch's traces share a few roles. Per role: the record it was worked
    # out for (a reread gives another), the epoch, the unit rules and the policy.
    role_problems: dict[str, str | None] = {}
    per_role: dict[str, tuple[VersionedBinding, str, UnitRules, Policy]] = {}
    for index, trace in valid:
        role = trace.role
        if role not in role_problems:
            try:
                validate_role_name(role)
                role_problems[role] = None
            except ValueError as exc:
                role_problems[role] = str(exc)
        problem = role_problems[role]
        if problem is not None:
            results[index] = _refused(index, trace, "invalid", problem, {"field": "role"})
            continue
        tools = trace.tools
        if tools and "\n" in "".join(tools):
            results[index] = _refused(index, trace, "invalid",
                                      "tools: a tool name must not contain a line break",
                                      {"field": "tools"})
            continue
        config = trace.config
        try:
            record = bindings.get(role)
            binding = record.binding
            placed = config == binding.current or config == binding.candidate  # `bound`
            if not placed and role not in bindings.fresh:
                record = bindings.reread(role)
                binding = record.binding
                placed = bound(config, binding)
        except NotFound as exc:
            results[index] = _refused(index, trace, exc.code, exc.message, exc.details)
            continue
        if not placed:
            results[index] = _refused(index, trace, NOT_BOUND, not_bound(trace, record), {
                "field": "config", "config": config, "current": binding.current,
                "candidate": binding.candidate, "version": record.version})
            continue
        if trace.time is None:
            trace = trace.model_copy(update={"time": now})
        shared = per_role.get(role)
        if shared is None or shared[0] is not record:
            shared = per_role[role] = (record, epoch_of(binding), UnitRules(binding, connection),
                                       policy_of(binding.gate.invariants))
        _, epoch, units, policy = shared
        verdict = policy.judge(trace)
        # Every field in order, by tuple.__new__: Checked's own __new__ (a Python frame,
        # with a keyword) cost three times as much, once per trace.
        checked.append(tuple.__new__(Checked, (trace, verdict, epoch, record.version,
                                               binding.trace_retention,
                                               units.facts(trace, verdict, now), now)))
        positions.append(index)
    return checked, positions


def _check_and_store(valid: list[tuple[int, Trace]],
                     results: list[dict[str, Any] | str | None], bindings: RequestBindings,
                     store: TraceStore, now: float, charge: Charge | None,
                     environ: dict[str, Any]) -> tuple[list[Checked], list[Stored], list[int], Charge | None]:
    """Check and store every trace: (stored traces, their outcomes, their request indices,
    `charge` if it was never counted).

    Traces the store answered `Moved` (their role's binding changed after this
    worker's copy was taken) are checked again against the binding in Redis.
    The quota `charge` rides on the first store call; QuotaExceeded when over.
    """
    done: list[Checked] = []
    outcomes: list[Stored] = []
    positions: list[int] = []
    pending = valid
    for _ in range(MOVE_ATTEMPTS):
        checked, where = _check(pending, results, bindings, now, store.connection)
        pending = []
        moved: set[str] = set()
        try:
            answers = store.add(checked, charge) if checked else []
        except OverQuota as over:
            raise quota_exceeded(refusal(over.what, over.used, over.limit, now)) from None
        if any(not isinstance(outcome, Moved) for outcome in answers):
            environ[MAY_BE_APPLIED] = True  # a later failure is no "nothing applied"
        charge = None if checked else charge
        for index, item, outcome in zip(where, checked, answers):
            if isinstance(outcome, Moved):
                pending.append((index, item.trace))
                moved.add(item.trace.role)
                continue
            done.append(item)
            outcomes.append(outcome)
            positions.append(index)
        for role in moved:
            bindings.forget(role)
        if not pending:
            break
    for index, trace in pending:
        results[index] = _refused(index, trace, "conflict",
                                  f"the binding of role {trace.role!r} kept changing while "
                                  "this trace was stored; send it again", {"role": trace.role})
    return done, outcomes, positions, charge


def _refused(index: int, trace: Trace, code: str, message: str,
             details: dict[str, Any] | None = None) -> dict[str, Any]:
    return item_refusal(index, {"run_id": trace.run_id}, code, message, details)


def _tripwire(checked: list[Checked], stored: list[Any], now: float,
              services: Services) -> list[dict[str, Any]]:
    """Roll back each role a breaching candidate/shadow trace belongs to.

    Tried once per (role, config): after that the role is rolled back, or that
    config was not its live candidate; another config's breach is tried on its own.
    """
    fired: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    for item, outcome in zip(checked, stored):
        trace, verdict = item.trace, item.verdict
        if (trace.role, trace.config) in done or not tripwire.applies(trace, verdict):
            continue
        # A retry of a run stored earlier in this same stage trips too: the first
        # attempt may have stored it and then failed before the rollback landed.
        if outcome.duplicate and outcome.location.epoch != item.epoch:
            continue
        trip = tripwire.trip(services.store, trace, verdict, now)
        done.add((trace.role, trace.config))
        if trip is None:
            continue
        services.cache.put(trip.record)
        fired.append({"role": trace.role, "run_id": trip.run_id, "tools": list(trip.tools),
                      "required_lost": list(trip.required_lost),
                      "version": trip.record.version,
                      "stage": trip.record.binding.stage.value})
    return fired


def _all_refused(refused: list[dict[str, Any]],
                 trips: list[dict[str, Any]]) -> ResponseReturnValue:
    """Answer 403 or 422: every trace was refused (`refused`, their results)."""
    one = len(refused) == 1
    # Every trace outside the token's roles: the request as a whole is forbidden.
    forbidden = all(r["error"]["code"] == "forbidden" for r in refused)
    summary = refused[0]["error"]["message"] if one else \
        f"all {len(refused)} traces were refused"
    code = "forbidden" if forbidden else refused[0]["error"]["code"] if one else "invalid"
    body = {"accepted": 0, "duplicates": 0, "refused": len(refused), "results": refused,
            "tripwire": trips,
            "error": {"code": code, "message": summary, "details": {"refused": [
                {"index": r["index"], "reason": r["error"]["message"]} for r in refused]}}}
    return jsonify(body), 403 if forbidden else 422
