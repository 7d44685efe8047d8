"""Structured logs: one JSON line per request and one per decision, tied by a request id.

Two levels, so a year of logs fits a disk: state changes (binding writes,
rollbacks, archives, restores, a tripwire) and failed requests (5xx) are
written at `warning` and always; every other request line is `info`. Resolves
and OFREP evaluations, the calls every agent makes on every job, write their
two lines for a sample only (ROLEGATE_LOG_SAMPLE, 1 in 100 by default: every
100th of each worker, counted, not drawn, so the share is exact), their
decision line saying `"sampled": <rate>`. ROLEGATE_LOG_LEVEL=warning silences
the `info` lines altogether.

The request id comes from the caller's `X-Request-Id` when it is a sane token,
otherwise it is drawn here; either way it is echoed in the response, so a
caller's log line and ours can be joined. Nothing here ever reads the
`Authorization` header or the query string, so a token cannot reach the log.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
import time
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, has_app_context, request

from router.server.log_batch import LineBatcher
from router.server.services import services_of

#: The logger every JSON line goes to; it has its own handler so lines stay pure JSON.
LOGGER_NAME = "rolegate.events"
REQUEST_ID_HEADER = "X-Request-Id"
#: A caller's id is echoed only when it is short and plain, so it cannot forge log lines.
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: Operator endpoints whose success is a decision worth its own line.
DECISION_ENDPOINTS = {
    "bindings.put_binding": "replace",
    "bindings.rollback": "rollback",
    "bindings.set_canary": "canary",
    "bindings.promote": "promote",
    "bindings.pause": "pause",
    "bindings.resume": "resume",
    "archive.archive": "archive",
    "archive.restore": "unarchive",
}
#: Operator endpoints that change the whole table: their answer is logged as the decision.
TABLE_ENDPOINTS = {
    "restore_snapshot.restore_snapshot": "restore_snapshot",
    "accept_redis.accept_redis": "accept_redis",
}
#: ROLEGATE_LOG_LEVEL -> the events logger's level.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}
_START = "rolegate.started"

log = logging.getLogger(LOGGER_NAME)
bp = Blueprint("logs", __name__)
#: Resolve lines go out in batches from a background thread (see router.server.log_batch).
resolve_lines = LineBatcher(log)


class Sampler:
    """Takes `rate` of the calls it is asked about: exactly, by counting (thread-safe)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._seen = itertools.count()

    def take(self) -> bool:
        """Whether this call is one of the sample (the first call of each 1/rate is)."""
        rate = self.rate
        if rate >= 1.0:
            return True
        if rate <= 0.0:
            return False
        seen = next(self._seen)  # next() on a count is atomic under the GIL
        # The first call, then each call that crosses a whole multiple of 1/rate: a quiet
        # router's first resolve is always seen.
        return seen == 0 or int(seen * rate) > int((seen - 1) * rate)


#: Which resolves and OFREP evaluations write their lines; init_app sets the rate from
#: ROLEGATE_LOG_SAMPLE (one router app per process, so one module-wide sampler).
resolve_sample = Sampler(0.01)


def configure(stream: Any = None) -> logging.Logger:
    """Give the events logger one plain handler (once), writing bare JSON lines."""
    if not log.handlers:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        # The root logger (gunicorn's, pytest's) would prefix and duplicate each line.
        log.propagate = False
    return log


_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode


def line(kind: str, request_id: str | None, fields: dict[str, Any]) -> str:
    """One JSON line of `kind`: the time, the request id if any, then `fields`."""
    out: dict[str, Any] = {"ts": round(time.time(), 6), "type": kind}
    if request_id is not None:
        out["request_id"] = request_id
    out.update(fields)
    text: str = _encode(out)
    return text


def emit(kind: str, **fields: Any) -> None:
    """Write one JSON line of `kind` with `fields`, stamped with the time and request id."""
    if log.isEnabledFor(logging.INFO):
        request_id = g.get("request_id") if has_app_context() else None
        log.info(line(kind, request_id, fields))


def log_resolve(request_id: str, resolution: Any, method: str, path: str,
                duration_ms: float, actor: str | None) -> None:
    """Queue a resolve's decision and request lines, if this one is sampled (FLUSH_INTERVAL_S)."""
    if not log.isEnabledFor(logging.INFO) or not resolve_sample.take():
        return
    decision = {
        "decision": "resolve", "role": resolution["role"], "arm": resolution["arm"],
        "config": resolution["config"], "version": resolution["version"],
        "key": resolution["key"], "stale": resolution["stale"]}
    if resolve_sample.rate < 1.0:
        decision["sampled"] = resolve_sample.rate  # a reader scales counts by 1/rate
    resolve_lines.add(line("decision", request_id, decision)
        + "\n" + line("request", request_id, {
            "method": method, "path": path, "status": 200,
            "duration_ms": round(duration_ms, 3), "actor": actor}))


def log_request(request_id: str, method: str, path: str, status: int, duration_ms: float,
                actor: str | None) -> None:
    """Queue a request line like the one `_after` writes (for the single-trace ingest path)."""
    if log.isEnabledFor(logging.INFO):
        resolve_lines.add(line("request", request_id, {
            "method": method, "path": path, "status": status,
            "duration_ms": round(duration_ms, 3), "actor": actor}))


def log_ingest(request_id: str, path: str, status: int, duration_ms: float, actor: str,
               trips: list[dict[str, Any]]) -> None:
    """Log an answered trace POST as `_after` logs the view's (for the ingest fast path)."""
    if not trips:
        log_request(request_id, "POST", path, status, duration_ms, actor)
        return
    lines = [*_trip_lines(request_id, trips), line("request", request_id, {
        "method": "POST", "path": path, "status": status,
        "duration_ms": round(duration_ms, 3), "actor": actor})]
    if log.isEnabledFor(logging.WARNING):  # a state change: always written
        log.log(logging.WARNING, "\n".join(lines))


def _trip_lines(request_id: str | None, trips: Any) -> list[str]:
    """A decision line per rollback a trace POST's breaching traces caused."""
    return [line("decision", request_id, {
        "decision": "rollback", "actor": "tripwire", "role": trip.get("role"),
        "version": trip.get("version"), "stage": trip.get("stage"),
        "run_id": trip.get("run_id"), "tools": trip.get("tools"),
        "required_lost": trip.get("required_lost")}) for trip in trips]


def flush() -> None:
    """Write the queued resolve lines now (tests, and before a worker exits)."""
    resolve_lines.flush()


def request_id_from(header: str | None) -> str:
    """The caller's request id if it is safe to echo, else a fresh one."""
    if header is not None and _SAFE_REQUEST_ID.fullmatch(header):
        return header
    return os.urandom(16).hex()


def _before() -> None:
    request.environ[_START] = time.perf_counter()
    g.request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))


def _after(response: Response) -> Response:
    # Resolve each proxy once: this runs on every request, resolves included.
    req = request._get_current_object()  # type: ignore[attr-defined]
    ctx = g._get_current_object()
    started = req.environ.get(_START)
    duration_ms = (time.perf_counter() - started) * 1e3 if started is not None else None
    request_id = ctx.get("request_id")
    response.headers[REQUEST_ID_HEADER] = request_id or ""
    if not log.isEnabledFor(logging.WARNING):
        return response
    resolution = ctx.get("resolution")
    if resolution is not None and not services_of(current_app).settings.log_resolves:
        return response
    principal = ctx.get("principal")
    actor = principal.name if principal is not None else None
    if resolution is not None:
        log_resolve(request_id, resolution, req.method, req.path, duration_ms or 0.0, actor)
        return response
    lines = []
    if 200 <= response.status_code < 300:
        endpoint = req.endpoint or ""
        action = DECISION_ENDPOINTS.get(endpoint)
        table_action = TABLE_ENDPOINTS.get(endpoint)
        if action is not None:
            lines.append(line("decision", request_id, _binding_decision(action, response, actor)))
        elif table_action is not None:
            lines.append(line("decision", request_id, {
                "decision": table_action, **(response.get_json(silent=True) or {}),
                "actor": actor}))
        elif endpoint == "traces.ingest":
            # A breaching trace rolls its role back inside the ingest request;
            # api_traces leaves the list on g, so the answer is not parsed again.
            trips = ctx.get("tripwire")
            if trips is None:
                trips = (response.get_json(silent=True) or {}).get("tripwire") or ()
            lines.extend(_trip_lines(request_id, trips))
        elif endpoint == "offline.post_verdict":
            stored = response.get_json(silent=True) or {}
            verdict = stored.get("verdict") or {}
            lines.append(line("decision", request_id, {
                "decision": "offline_verdict", "role": stored.get("role"),
                "config": verdict.get("config"), "passed": verdict.get("passed"),
                "actor": actor}))
    lines.append(line("request", request_id, {
        "method": req.method, "path": req.path, "status": response.status_code,
        "duration_ms": round(duration_ms, 3) if duration_ms is not None else None,
        "actor": actor}))
    # A state change or a failure is a warning (always written); a plain request is info.
    level = logging.WARNING if len(lines) > 1 or response.status_code >= 500 else logging.INFO
    if log.isEnabledFor(level):
        # One record for the request's lines: one handler call and one write, not two.
        log.log(level, "\n".join(lines))
    return response


def _binding_decision(action: str, response: Response, actor: str | None) -> dict[str, Any]:
    record = response.get_json(silent=True) or {}
    binding = record.get("binding") or {}
    body = request.get_json(silent=True)
    reason = body.get("reason") if isinstance(body, dict) else None
    return {"decision": action, "role": record.get("role"), "version": record.get("version"),
            "stage": binding.get("stage"), "share": binding.get("share"),
            "candidate": binding.get("candidate"), "current": binding.get("current"),
            "paused": binding.get("paused"), "reason": reason, "actor": actor}


bp.before_app_request(_before)
bp.after_app_request(_after)


def init_app(app: Flask) -> None:
    """Give the JSON lines somewhere to go, at the configured level and resolve sample."""
    settings = services_of(app).settings
    configure()
    log.setLevel(LEVELS[settings.log_level])
    resolve_sample.rate = settings.log_sample
