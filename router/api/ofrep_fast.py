"""OFREP's evaluations as a thin WSGI layer in front of Flask: OFREP at resolve's cost.

An OpenFeature provider evaluates a flag per job, so OFREP is as hot a call as
`GET /v1/resolve`; through Flask's request context, URL matching, hooks and
the auth decorator it reached 0.52x resolve's requests per CPU-second (issue
38). This layer answers the plain, successful single and bulk evaluations
itself, as `router.api.resolve_fast` answers resolves: the same access
decision (`router.server.access.admit`), the same evaluation code
(`router.api.ofrep_eval`, exposures counted), the same body, headers, log
lines and counters as the views in `router.api.ofrep` (tests/test_ofrep_fast.py
holds the two side by side). Everything else goes to Flask with the body put
back: a refusal of any kind, a body it cannot read as an OFREP request, a role
this worker's copy lacks, `include=body` (a Redis read), any query string, a
browser's request from an origin ROLEGATE_CORS_ORIGINS does not list (the
cross-site check answers it), a chunked or compressed body.

Like the other fast paths it runs only while the app's request hooks are the
ones it knows to reproduce (`router.api.resolve_fast.KNOWN_HOOKS`).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

from bindings.errors import RolegateError
from bindings.models import ROLE_NAME_PATTERN
from router.api.bodies import MAX_DEPTH
from router.api.ingest_fast import IngestFastPath
from router.api.ofrep_eval import (
    bulk_payload,
    count_all,
    evaluate_all,
    evaluate_one,
    single_payload,
)
from router.api.ofrep_shapes import MAX_BODY_BYTES, OfrepError, etag_matches, read_context
from router.api.resolve_fast import ResolveFastPath, hook_support
from router.server import access, cors, hosts, logs, metrics
from router.server.services import services_of
from router.server.tokens import Principal

BULK = "/ofrep/v1/evaluate/flags"
SINGLE = BULK + "/"
#: Scopes the Flask views allow (router.api.ofrep: caller, gatekeeper; operator always).
OFREP_SCOPES = access.allowed_scopes(("caller", "gatekeeper"))
#: Headers that send a request to Flask: `include=body`, and body encodings.
_FLASK_HEADERS = ("HTTP_X_ROLEGATE_INCLUDE", "HTTP_CONTENT_ENCODING", "HTTP_TRANSFER_ENCODING")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class OfrepFastPath:
    """WSGI middleware: answers plain OFREP evaluations, passes the rest to `inner`."""

    def __init__(self, app: Flask, inner: WSGIApp) -> None:
        self.app = app
        self.inner = inner
        self._enabled: bool | None = None
        self._logs = self._metrics = False
        self._hosts: tuple[str, ...] | None = None

    def enabled(self) -> bool:
        """True while every request hook of the app is one this layer reproduces."""
        if self._enabled is None:
            self._enabled, self._logs, self._metrics = hook_support(self.app, "ofrep", "ofrep")
        return self._enabled

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Answer a plain evaluation here; hand anything else to Flask."""
        path: str = environ.get("PATH_INFO", "")
        if (path.startswith(BULK) and environ.get("REQUEST_METHOD") == "POST"
                and self.enabled()):
            answered = self._evaluate(environ, path, start_response)
            if answered is not None:
                return answered
        return self.inner(environ, start_response)

    def _evaluate(self, environ: dict[str, Any], path: str,
                  start_response: Callable[..., Any]) -> list[bytes] | None:
        started = time.perf_counter()
        role: str | None = None
        if path != BULK:
            role = path[len(SINGLE):]
            if not path.startswith(SINGLE) or ROLE_NAME_PATTERN.fullmatch(role) is None:
                return None
        if environ.get("QUERY_STRING") or any(name in environ for name in _FLASK_HEADERS):
            return None
        origins = cors.configured(self.app)
        origin = environ.get("HTTP_ORIGIN")
        if (origin is not None and origin not in origins) or (
                origin is None and environ.get("HTTP_SEC_FETCH_SITE") == "cross-site"):
            return None  # the dashboard's cross-site check decides
        services = services_of(self.app)
        principal = self._admit(environ, services, role)
        if principal is None:
            return None
        raw = _body(environ)
        if raw is None:
            return None
        try:
            key, context = read_context(_parse(raw))
        except (OfrepError, ValueError):
            return None  # the view says what is wrong, in OFREP's words
        status = "200 OK"
        headers = [("Content-Type", "application/json")]
        if role is not None:
            record, stale = services.cache.get(role)
            if record is None:
                return None
            resolution = evaluate_one(self.app, role, record, key, context, stale,
                                      principal.name)
            body = single_payload(resolution)
        else:
            records, stale = services.cache.all()
            if not records and not services.cache.loaded:
                return None
            resolutions = evaluate_all(records, key, context, stale, principal.may)
            body, tag = bulk_payload(resolutions)
            if etag_matches(environ.get("HTTP_IF_NONE_MATCH"), tag):
                status, body, headers = "304 NOT MODIFIED", b"", []
            else:
                count_all(self.app, resolutions, records, principal.name)
                # Now with each evaluation's run id; the tag stays the evaluations' own.
                body, _ = bulk_payload(resolutions)
            headers.append(("ETag", tag))
        if body:
            headers.append(("Content-Length", str(len(body))))
        request_id = logs.request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        headers.append((logs.REQUEST_ID_HEADER, request_id))
        if origins:
            headers += cors.answer_headers(origin, path, origins)
        start_response(status, headers)
        elapsed_ms = (time.perf_counter() - started) * 1e3
        if role is not None:
            if self._metrics:
                metrics.count_resolve(role, resolution["arm"], stale)
            if self._logs and services.settings.log_resolves:
                logs.log_resolve(request_id, resolution, "POST", path, elapsed_ms,
                                 principal.name)
        else:
            if self._metrics:
                metrics.count_request(int(status[:3]))
            if self._logs:
                logs.log_request(request_id, "POST", path, int(status[:3]), elapsed_ms,
                                 principal.name)
        return [body]

    def _admit(self, environ: dict[str, Any], services: Any, role: str | None) -> Principal | None:
        if self._hosts is None:
            self._hosts = hosts.parse_allowed(services.settings.allowed_hosts)
        try:
            # The Flask decorator's decision (router.server.access); a refusal is Flask's to say.
            return access.admit(environ, services.tokens, self._hosts, OFREP_SCOPES, role)
        except RolegateError:
            return None


def _parse(raw: bytes) -> Any:
    """The body as JSON, when the view's strict reading (`bodies.loads`) would agree.

    The cached default decoder is a third of `bodies.loads`'s cost; what only
    the strict reading refuses (NaN and Infinity, \\u escapes that may be lone
    surrogates, deep nesting) is left to the view: ValueError hands it on.
    """
    if (b"NaN" in raw or b"Infinity" in raw or b"\\u" in raw
            or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH):
        raise ValueError("left to the view's strict reading")
    return json.loads(raw.decode("utf-8"))


def _body(environ: dict[str, Any]) -> bytes | None:
    """The request body, read once and put back for Flask; None if Flask should read it."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    if length <= 0 or length > MAX_BODY_BYTES:
        return None
    raw: bytes = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(raw)  # Flask reads it again if handed on
    return raw if len(raw) == length else None


def installed(app: Flask) -> OfrepFastPath | None:
    """The OFREP fast path in `app`'s chain of WSGI layers, if it is there."""
    layer: Any = app.wsgi_app
    while layer is not None and not isinstance(layer, OfrepFastPath):
        layer = getattr(layer, "inner", None)
    return layer


def init_app(app: Flask) -> None:
    """Put the fast path in front of Flask, behind the resolve and ingest fast paths.

    Resolves, then single traces, are the hotter calls: they keep being looked at first.
    """
    holder: Any = app.wsgi_app
    if not isinstance(holder, ResolveFastPath | IngestFastPath):
        app.wsgi_app = OfrepFastPath(app, holder)  # type: ignore[method-assign]
        return
    while isinstance(holder.inner, ResolveFastPath | IngestFastPath):
        holder = holder.inner
    holder.inner = OfrepFastPath(app, holder.inner)
