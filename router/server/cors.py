"""Browsers on other origins: `ROLEGATE_CORS_ORIGINS` lets their pages resolve and evaluate.

A web app served from `https://app.example.com` that resolves through OFREP
(OpenFeature's web provider) or `GET /v1/resolve` sends a CORS preflight
(`OPTIONS` with `Origin` and `Access-Control-Request-Method`: its requests carry
`Authorization` and a JSON body) and reads the answer only when it names its
origin. For the origins an operator lists in `ROLEGATE_CORS_ORIGINS`
(comma-separated, `scheme://host[:port]`) and only on the paths in CORS_PATHS,
this module answers the preflight (204) and marks every answer, errors
included, so the page can read OFREP's error codes. Any other origin gets no
CORS header at all: the browser keeps its page away from the answer, and its
non-GET requests stay refused by the dashboard's cross-site check.

Bearer tokens, not cookies, carry the caller: no `Allow-Credentials`.
`Vary: Origin` rides on every answer of those paths once origins are listed,
so a cache never hands one origin's marked answer to another.
"""

from __future__ import annotations

from collections.abc import Iterable

from flask import Blueprint, Flask, Response, current_app, request

from router.server.services import services_of
from router.server.settings import parse_origins

#: Where browsers may come from another origin: resolving and OFREP's evaluations.
CORS_PATHS = ("/v1/resolve/", "/ofrep/v1/evaluate/flags")
ALLOW_METHODS = "GET, POST, OPTIONS"
#: What the OFREP providers and the SDKs send besides the CORS-safelisted headers.
ALLOW_HEADERS = "Authorization, Content-Type, If-None-Match, X-Request-Id, X-Rolegate-Include"
#: What a page may read: the bulk ETag (the web provider's polling), ids, a retry hint.
EXPOSE_HEADERS = "ETag, X-Request-Id, X-Rolegate-Worker, Retry-After"
#: Seconds a browser may reuse a preflight's answer.
MAX_AGE = "600"
SETTINGS_EXTENSION = "rolegate_cors"

bp = Blueprint("cors", __name__)


def applies(path: str) -> bool:
    """Whether `path` answers browsers from the listed origins."""
    return path.startswith(CORS_PATHS)


def answer_headers(origin: str | None, path: str,
                   origins: frozenset[str]) -> list[tuple[str, str]]:
    """The headers an answer to `path` for a page at `origin` carries (empty: none)."""
    if not origins or not applies(path):
        return []
    if origin is None or origin not in origins:
        return [("Vary", "Origin")]
    return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin"),
            ("Access-Control-Expose-Headers", EXPOSE_HEADERS)]


def preflight_headers(origin: str) -> list[tuple[str, str]]:
    """The headers of a preflight's answer for a listed `origin`."""
    return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin"),
            ("Access-Control-Allow-Methods", ALLOW_METHODS),
            ("Access-Control-Allow-Headers", ALLOW_HEADERS),
            ("Access-Control-Max-Age", MAX_AGE)]


def listed(origin: str | None, path: str) -> bool:
    """Whether this app lets a page at `origin` call `path` (the cross-site check asks)."""
    return origin is not None and applies(path) and origin in configured(current_app)


def configured(app: Flask) -> frozenset[str]:
    """The origins `app` answers (parsed once at boot)."""
    found: frozenset[str] = app.extensions.get(SETTINGS_EXTENSION, frozenset())
    return found


def _preflight() -> Response | None:
    if (request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers
            or not listed(request.headers.get("Origin"), request.path)):
        return None  # Flask's own OPTIONS answer: no CORS header, the browser refuses
    response = current_app.response_class(status=204)
    _set(response, preflight_headers(request.headers["Origin"]))
    return response


def _mark(response: Response) -> Response:
    origins = configured(current_app)
    if origins:
        _set(response, answer_headers(request.headers.get("Origin"), request.path, origins))
    return response


def _set(response: Response, headers: Iterable[tuple[str, str]]) -> None:
    for name, value in headers:
        if name == "Vary":
            response.vary.add(value)
        else:
            response.headers[name] = value


bp.before_app_request(_preflight)
bp.after_app_request(_mark)


def init_app(app: Flask) -> None:
    """Read the listed origins once (the hooks come with `bp`)."""
    app.extensions[SETTINGS_EXTENSION] = parse_origins(
        services_of(app).settings.cors_origins)
