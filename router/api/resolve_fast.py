"""The resolve hot path as a thin WSGI layer in front of Flask.

`GET /v1/resolve/<role>?key=K` is the one call every agent makes on every job.
Through Flask it paid a request context, URL matching over every route, the
before/after hooks and a Response object: together more than the resolve
itself, and measured against a bare Flask app under the same gunicorn settings
(bench/resolve.py) it reached only 0.58 of the baseline's CPU per request.

This layer answers the plain, successful resolve itself, with the same body,
the same headers, the same log lines and the same counters as the Flask view
(tests/test_resolve_fast.py holds the two side by side), and hands everything
else to Flask unchanged: a missing or unknown token, a scope that may not
resolve, an unknown role, no table yet, a key it would have to decode. So
every refusal keeps coming from one place, the Flask app, with its one error
shape.

It only runs while the app's request hooks are the ones it knows to reproduce
(KNOWN_HOOKS): a hook added later (say a Host check) turns it off, with a
warning, rather than being skipped; teach this module the hook to turn it on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from flask import Flask

from bindings.errors import RolegateError
from bindings.models import ROLE_NAME_PATTERN
from rolegate.routing import new_key, resolve
from router.api.exposures import count_resolution
from router.server import access, cors, hosts, logs, metrics
from router.server.services import services_of

PREFIX = "/v1/resolve/"
#: Scopes the Flask view allows (router.api.resolve: caller, gatekeeper; operator always).
RESOLVE_SCOPES = access.allowed_scopes(("caller", "gatekeeper"))
#: The query strings answered here: one plain `key`, then up to 10 plain `attr.<name>=`
#: (a role bucketed by an attribute, or with rules, is resolved with them on every job);
#: the Flask view decodes the rest, and refuses what it must.
_PLAIN_KEY = re.compile(r"key=([A-Za-z0-9._~:@-]{1,500})"
                        r"((?:&attr\.[A-Za-z0-9_.-]{1,64}=[A-Za-z0-9._~:@-]{1,200}){0,10})")
_PLAIN_ATTRIBUTE = re.compile(r"&attr\.([A-Za-z0-9_.-]{1,64})=([A-Za-z0-9._~:@-]{1,200})")
#: The hooks this layer reproduces; any other registered hook turns it off.
KNOWN_HOOKS = frozenset({
    "router.server.logs._before", "router.server.logs._after",
    "router.server.metrics._observe", "router.dashboard.views._refuse_cross_site_writes",
    # Preflights are OPTIONS (never fast); answers get the same marks (cors.answer_headers).
    "router.server.cors._preflight", "router.server.cors._mark",
    "router.server.hosts.init_app.<locals>._check_host",
    "router.api.bodies.refuse_oversized_chunked",
    # Acts on 503 answers only, which the fast paths never give (they hand those on).
    "router.api.health._note_refusal",
})

log = logging.getLogger("rolegate")
#: One encoder for every answer: json.dumps with separators builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def hook_names(app: Flask, blueprint: str = "resolve") -> set[str]:
    """The request hooks that run for the views of `blueprint`: the app's and its own."""
    names: set[str] = set()
    for registry in (app.before_request_funcs, app.after_request_funcs,
                     app.teardown_request_funcs, app.url_value_preprocessors):
        for scope, funcs in registry.items():
            if scope in (None, blueprint):
                names.update(f"{f.__module__}.{f.__qualname__}" for f in funcs)
    return names


class HookSupport(NamedTuple):
    """Whether a fast path may run for a blueprint, and which hooks it must reproduce."""

    enabled: bool
    logs: bool
    metrics: bool


def hook_support(app: Flask, blueprint: str, label: str) -> HookSupport:
    """Read the hooks of `blueprint`'s views: off (with a warning) if one is unknown.

    A fast path logs and counts exactly when the Flask path would (a bench may
    leave the log and metrics hooks out).
    """
    hooks = hook_names(app, blueprint)
    unknown = hooks - KNOWN_HOOKS
    if unknown:
        log.warning("%s fast path off: unknown request hooks %s", label, sorted(unknown))
    return HookSupport(not unknown, "router.server.logs._after" in hooks,
                       "router.server.metrics._observe" in hooks)


class ResolveFastPath:
    """WSGI middleware: answers plain successful resolves, passes the rest to `inner`."""

    def __init__(self, app: Flask, inner: WSGIApp) -> None:
        self.app = app
        self.inner = inner
        self._enabled: bool | None = None
        self._logs = self._metrics = False
        self._worker = str(os.getpid())

    def enabled(self) -> bool:
        """True while every request hook of the app is one this layer reproduces."""
        if self._enabled is None:
            self._enabled, self._logs, self._metrics = hook_support(self.app, "resolve",
                                                                    "resolve")
        return self._enabled

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Answer a plain resolve here; hand anything else to Flask."""
        path: str = environ.get("PATH_INFO", "")
        if (path.startswith(PREFIX) and environ.get("REQUEST_METHOD") == "GET"
                and self.enabled()):
            answered = self._resolve(environ, path[len(PREFIX):], start_response)
            if answered is not None:
                return answered
        return self.inner(environ, start_response)

    def _resolve(self, environ: dict[str, Any], role: str,
                 start_response: Callable[..., Any]) -> list[bytes] | None:
        started = time.perf_counter()
        if ROLE_NAME_PATTERN.fullmatch(role) is None:
            return None
        services = services_of(self.app)
        try:
            # The Flask decorator's decision (router.server.access); a refusal is Flask's to say.
            actor = access.admit(environ, services.tokens, self._allowed_hosts(services),
                                 RESOLVE_SCOPES, role).name
        except RolegateError:
            return None
        query: str = environ.get("QUERY_STRING", "")
        attributes: dict[str, str] | None = None
        if query == "":
            key = new_key()
        else:
            plain = _PLAIN_KEY.fullmatch(query)
            if plain is None:
                return None
            key = plain.group(1)
            if plain.group(2):
                pairs = _PLAIN_ATTRIBUTE.findall(plain.group(2))
                attributes = dict(pairs)
                if len(attributes) != len(pairs):
                    return None  # a name given twice: the view's 400
        record, stale = services.cache.get(role)
        if record is None:
            return None
        resolution = resolve(role, record.binding, record.version, key, stale=stale,
                             attributes=attributes)
        count_resolution(self.app, role, resolution, record.binding, actor)
        body = _encode(resolution).encode()
        request_id = logs.request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Rolegate-Worker", self._worker if self._worker == str(os.getpid())
             else self._refresh_worker()),
            (logs.REQUEST_ID_HEADER, request_id),
        ]
        origins = cors.configured(self.app)
        if origins:
            headers += cors.answer_headers(environ.get("HTTP_ORIGIN"), environ["PATH_INFO"],
                                           origins)
        start_response("200 OK", headers)
        if self._metrics:
            metrics.count_resolve(role, resolution["arm"], stale)
        if self._logs and services.settings.log_resolves:
            logs.log_resolve(request_id, resolution, "GET", environ.get("PATH_INFO", ""),
                             (time.perf_counter() - started) * 1e3, actor)
        return [body]

    def _allowed_hosts(self, services: Any) -> tuple[str, ...]:
        allowed: tuple[str, ...] | None = getattr(self, "_hosts", None)
        if allowed is None:
            allowed = self._hosts = hosts.parse_allowed(services.settings.allowed_hosts)
        return allowed

    def _refresh_worker(self) -> str:
        # gunicorn forks after the app is built: name the process that answers.
        self._worker = str(os.getpid())
        return self._worker


def init_app(app: Flask) -> None:
    """Put the fast path in front of the app's WSGI callable."""
    app.wsgi_app = ResolveFastPath(app, app.wsgi_app)  # type: ignore[method-assign]
