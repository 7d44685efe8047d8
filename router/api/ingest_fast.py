"""The trace ingest hot path as a thin WSGI layer in front of Flask.

Every agent run ends in one `POST /v1/traces` of one trace, and the SDK's
reporter sends batches. Through Flask a request paid a request context, URL
matching, five request hooks, the auth decorator (and this layer's auth again
when it handed the request on), the OTLP sniffing and a Response object around
the work itself; measured against a bare Flask app that parses the same body
and makes one Redis round trip (bench/serving.py, figure 4; bench/ingest_batch.py
for batches) it reached under half the baseline's rate.

This layer stores the plain single trace itself, with the same checks, the same
one script call (quota counted inside it), the same answer, headers, log line
and counters as the Flask view (tests/test_ingest_fast.py holds the two side by
side). A batch (`{"traces": [...]}` or a bare list), or one trace sent with a
`Prefer` header, whose every trace is valid, it stores through the view's own
`router.api.traces.store_batch` and answers with the view's text
(`trace_answers.answer_text`: 200 or 207, compact or full; tests/test_ingest_fast_batch.py).
It hands everything else to Flask: OTLP, a compressed or chunked body, a
browser's request (Origin, Sec-Fetch-Site), a missing or unknown token, a trace
that fails validation, a body big enough to be validated off the loop; for a
single trace also a role the token may not report for, a role or config this
worker's copy does not know, a breach that would trip the wire. Each of those is
decided before anything is written, and the body read here is handed on intact.

After the store has run, some outcomes still go to Flask, told what happened
through the environ (`router.api.trace_answers.QUOTA_COUNTED`): over the quota (the
view answers the 429 at once), every trace of a batch refused (the view's 403 or
422, without counting the quota twice), and a binding that moved under a single
trace or a Redis error (the view checks and stores again, without counting the
quota twice; storing is idempotent on the run id).

Like the resolve fast path it runs only while the app's request hooks are the
ones it knows to reproduce (`router.api.resolve_fast.KNOWN_HOOKS`).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis
from flask import Flask
from pydantic import ValidationError

from bindings.errors import OutcomeUnknown, RolegateError
from bindings.models import ROLE_NAME_PATTERN
from gatekeeper import tripwire
from gatekeeper.checks.invariants import check
from gatekeeper.store.trace_ingest import Checked, OverQuota, Stored
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.unit_events import unit_facts
from rolegate.trace import Trace
from router.api import trace_answers as answers
from router.api.judge_sampling import offer_sampled
from router.api.resolve_fast import ResolveFastPath, hook_support
from router.api.trace_limits import OFF_LOOP_BYTES, body_prefix, refuse_deep
from router.api.trace_parse import parse_all_valid
from router.server import access, hosts, logs, metrics
from router.server.errors import BadRequest, QuotaExceeded
from router.server.quota import refusal, script_charge
from router.server.services import services_of
from router.server.tokens import Principal

PATH = "/v1/traces"
#: Scopes the Flask view allows (router.api.traces: caller, gatekeeper; operator always).
INGEST_SCOPES = access.allowed_scopes(("caller", "gatekeeper"))
#: Headers that send a request to Flask unread: browsers' (the cross-site check) and encodings.
_FLASK_HEADERS = ("HTTP_ORIGIN", "HTTP_SEC_FETCH_SITE", "HTTP_CONTENT_ENCODING",
                  "HTTP_TRANSFER_ENCODING")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: router.api.traces.store_batch: the view's check, store and trip, given to this layer.
StoreBatch = Callable[..., tuple[int, list[dict[str, Any]], list[tuple[str, str]]]]


class IngestFastPath:
    """WSGI middleware: stores plain trace JSON POSTs, passes the rest to `inner`."""

    def __init__(self, app: Flask, inner: WSGIApp, store_batch: StoreBatch) -> None:
        self.app = app
        self.inner = inner
        self.store_batch = store_batch
        self._enabled: bool | None = None
        self._logs = self._metrics = False
        self._hosts: tuple[str, ...] | None = None

    def enabled(self) -> bool:
        """True while every request hook of the app is one this layer reproduces."""
        if self._enabled is None:
            self._enabled, self._logs, self._metrics = hook_support(self.app, "traces",
                                                                    "ingest")
        return self._enabled

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Store plain trace JSON here; hand anything else to Flask."""
        if (environ.get("PATH_INFO") == PATH and environ.get("REQUEST_METHOD") == "POST"
                and self.enabled()):
            answered = self._ingest(environ, start_response)
            if answered is not None:
                return answered
        return self.inner(environ, start_response)

    def _caller(self, environ: dict[str, Any], services: Any) -> Principal | None:
        """Who sends this request, if the Flask view would let them; else None."""
        if self._hosts is None:
            self._hosts = hosts.parse_allowed(services.settings.allowed_hosts)
        try:
            # The Flask decorator's decision (router.server.access); the role comes later.
            return access.admit(environ, services.tokens, self._hosts, INGEST_SCOPES)
        except RolegateError:
            return None

    def _body(self, environ: dict[str, Any], limit: int | None) -> bytes | None:
        """The request body, read once and put back for Flask; None if Flask should read it."""
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        if length <= 0 or (limit is not None and length > limit):
            return None
        raw: bytes = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(raw)  # Flask reads it again if handed on
        return raw if len(raw) == length else None

    def _ingest(self, environ: dict[str, Any],
                start_response: Callable[..., Any]) -> list[bytes] | None:
        started = time.perf_counter()
        if environ.get("CONTENT_TYPE") != "application/json" or any(
                name in environ for name in _FLASK_HEADERS):
            # OTLP protobuf, a browser's request, an encoded body: Flask's, authenticated
            # there alone (not here as well).
            return None
        services = services_of(self.app)
        caller = self._caller(environ, services)
        if caller is None:
            return None
        raw = self._body(environ, self.app.config.get("MAX_CONTENT_LENGTH"))
        if raw is None:
            return None
        if body_prefix(raw) != 0:
            # A batch (or a bare list): the view's own store_batch, here. It is never OTLP
            # (a list, or `{"traces"}` with nothing beside it), so its body is not scanned.
            return self._batch(environ, start_response, raw, caller, started)
        # One object: OTLP JSON goes to Flask. A trace with a Prefer header (return=minimal:
        # the compact answer) is answered as a batch of one, as the view answers it.
        if b'"resourceSpans"' in raw:
            return None
        if "HTTP_PREFER" in environ:
            return self._batch(environ, start_response, raw, caller, started)
        trace = _valid(raw, caller)
        if trace is None:
            return None
        record, _ = services.cache.get(trace.role)
        if record is None or not answers.bound(trace.config, record.binding):
            return None  # the view reads the binding from Redis, or explains the refusal
        now = time.time()
        trace = trace.model_copy(update={"reporter": caller.name} if trace.time is not None
                                 else {"reporter": caller.name, "time": now})
        verdict = check(trace, record.binding.gate.invariants)
        store = self.app.extensions[answers.EXTENSION]
        charge = script_charge(services.quota, caller.name, 1, len(raw), now)
        if tripwire.applies(trace, verdict) or not store.takes_charge:
            return None
        item = Checked(trace, verdict, epoch_of(record.binding), record.version,
                       record.binding.trace_retention,
                       unit_facts(record.binding, trace, verdict, now,
                                  connection=store.connection), reported_at=now)
        try:
            (outcome,) = store.add([item], charge)
        except OverQuota as over:
            environ[answers.QUOTA_COUNTED] = refusal(over.what, over.used, over.limit, now)
            return None
        except (RolegateError, redis.RedisError) as exc:
            # Perhaps counted, perhaps stored: the view tries again (idempotent) and answers.
            environ[answers.QUOTA_COUNTED] = True
            if isinstance(exc, OutcomeUnknown):
                # Sent, no answer: if the view's try fails too, it must not say 503.
                environ[answers.MAY_BE_APPLIED] = True
            return None
        if not isinstance(outcome, Stored):
            environ[answers.QUOTA_COUNTED] = True  # the binding moved: the view re-reads it
            return None
        if outcome.clash:
            answers.note_clash(item, outcome)
        if not outcome.duplicate and record.binding.gate.judge is not None:
            offer_sampled(self.app, [(trace, item.epoch)], now)
        body = answers.single_answer(answers.stored_result(0, item, outcome),
                                    int(outcome.duplicate)).encode()
        request_id = logs.request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(body))),
                                  (logs.REQUEST_ID_HEADER, request_id)])
        if self._metrics:
            metrics.count_ingest(trace.role, trace.arm, 0 if outcome.duplicate else 1)
        if self._logs:
            logs.log_request(request_id, "POST", PATH, 200,
                             (time.perf_counter() - started) * 1e3, caller.name)
        return [body]

    def _batch(self, environ: dict[str, Any], start_response: Callable[..., Any], raw: bytes,
               caller: Principal, started: float) -> list[bytes] | None:
        """Store a batch whose every trace is valid as the view does; None to hand it on.

        What the view answers with an error (a bad trace, a body too big for the loop,
        every trace refused, over the quota, a Redis failure) it answers itself: handed
        on before anything is stored, or after with the quota marked counted (storing
        again is idempotent on the run id).
        """
        store = self.app.extensions[answers.EXTENSION]
        if len(raw) > OFF_LOOP_BYTES or not store.takes_charge:
            return None  # the view validates big bodies off the loop; a Cluster charges apart
        now = time.time()
        traces = parse_all_valid(raw, {"reporter": caller.name, "time": now})
        if traces is None:
            return None  # the view names each refused trace
        try:
            refuse_deep(traces, raw)
        except BadRequest:
            return None
        results: list[dict[str, Any] | str | None] = [None] * len(traces)
        minimal = answers.wants_minimal(environ.get("HTTP_PREFER"))
        try:
            duplicates, trips, ingested = self.store_batch(
                self.app, environ, caller, len(raw), list(enumerate(traces)), results, now,
                minimal=minimal)
        except QuotaExceeded as over:
            environ[answers.QUOTA_COUNTED] = over  # the view answers this 429
            return None
        except (RolegateError, redis.RedisError) as exc:
            environ[answers.QUOTA_COUNTED] = True  # the view tries again (idempotent)
            if isinstance(exc, OutcomeUnknown):
                environ[answers.MAY_BE_APPLIED] = True
            return None
        answer = answers.answer_text(results, duplicates, trips, minimal)
        if answer is None:
            environ[answers.QUOTA_COUNTED] = True  # all refused, nothing stored: the view says why
            return None
        status, text = answer
        body = text.encode()
        request_id = logs.request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if minimal:
            headers.append(("Preference-Applied", answers.MINIMAL))
        headers.append((logs.REQUEST_ID_HEADER, request_id))
        start_response("200 OK" if status == 200 else "207 MULTI-STATUS", headers)
        if self._metrics:
            metrics.count_batch(status, ingested, trips)
        if self._logs:
            logs.log_ingest(request_id, PATH, status, (time.perf_counter() - started) * 1e3,
                            caller.name, trips)
        return [body]


def _valid(raw: bytes, caller: Principal) -> Trace | None:
    """The body's one trace if the view would store it as it is; None to hand it on."""
    try:
        trace = Trace.model_validate_json(raw)
        refuse_deep([trace], raw)
    except (ValidationError, BadRequest):
        return None
    if (not caller.may(trace.role) or ROLE_NAME_PATTERN.fullmatch(trace.role) is None
            or any("\n" in tool for tool in trace.tools)):
        return None
    return trace


def init_app(app: Flask, store_batch: StoreBatch) -> None:
    """Put the fast path in front of Flask, behind the resolve fast path if there is one.

    Resolves are the hotter call: they keep being looked at first. `store_batch`:
    the view's (router.api.traces), which batches are stored through.
    """
    outer = app.wsgi_app
    if isinstance(outer, ResolveFastPath):
        outer.inner = IngestFastPath(app, outer.inner, store_batch)
    else:
        app.wsgi_app = IngestFastPath(app, outer, store_batch)  # type: ignore[method-assign]
