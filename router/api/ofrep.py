"""OpenFeature's remote evaluation protocol: `/ofrep/v1/evaluate/flags[/<role>]`.

Agents in TypeScript, Go or Java resolve through the OpenFeature SDK they
already use, with the OFREP provider pointed at the router. A role is the flag,
the job key is the targeting key, the context properties a role's rules read
are the job's attributes (any other property is ignored), and the value is the config id the job runs
(`router.api.ofrep_shapes` holds the mapping). The answer is the same
`rolegate.routing.resolve` as `GET /v1/resolve`, from the same worker copy of
the table, with the same tokens and scopes (caller, gatekeeper, operator).

Errors use OFREP's shapes and codes, not rolegate's `{"error": ...}`:
400 PARSE_ERROR / TARGETING_KEY_MISSING / INVALID_CONTEXT (a key over 500
characters, a body over MAX_BODY_BYTES), 404 FLAG_NOT_FOUND
(an unknown or archived role), 500 GENERAL when Redis cannot be read (the
only server status OFREP's providers parse). `X-Rolegate-Include: body` (or
`?include=body`) adds the config body to the metadata.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, request
from flask.typing import ResponseReturnValue

from bindings.errors import Archived, InvalidInput, NotFound, RolegateError, StoreUnavailable
from rolegate.routing import Resolution
from router.api import ofrep_fast
from router.api.bodies import loads
from router.api.configs import config_store
from router.api.ofrep_eval import (
    bulk_payload,
    count_all,
    evaluate_all,
    evaluate_one,
    single_payload,
)
from router.api.ofrep_shapes import (
    MAX_BODY_BYTES,
    OfrepError,
    etag_matches,
    failure,
    parse_error,
    read_context,
    too_big,
)
from router.api.resolve import uncached
from router.server.auth import may_act_on, principal, require
from router.server.errors import BadRequest
from router.server.services import services_of

bp = Blueprint("ofrep", __name__)

#: How an OFREP client asks for the config body (its providers set headers, not queries).
INCLUDE_HEADER = "X-Rolegate-Include"


def _json(payload: Any, status: int = 200) -> Response:
    return current_app.response_class(json.dumps(payload, separators=(",", ":")), status=status,
                                      mimetype="application/json")


def _body() -> Any:
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        raise too_big(length)
    raw = request.get_data(cache=True)
    if len(raw) > MAX_BODY_BYTES:
        raise too_big(len(raw))
    if not raw.strip():
        raise parse_error("the request body is empty; send {\"context\": {\"targetingKey\": "
                          "<job key>, ...}}")
    try:
        return loads(raw)
    except (BadRequest, InvalidInput) as exc:
        raise parse_error(exc.message) from None


def _wants_body() -> bool:
    wanted = False
    for where, asked in (("include", request.args.get("include")),
                         (INCLUDE_HEADER, request.headers.get(INCLUDE_HEADER))):
        if asked is not None and asked != "body":
            raise parse_error(f"{where}: only 'body' is known, got {asked!r}")
        wanted = wanted or asked == "body"
    return wanted


def _bodies(resolutions: list[Resolution]) -> dict[str, Any]:
    wanted: list[str] = []
    for resolution in resolutions:
        wanted.append(resolution["config"])
        if resolution["shadow"] is not None:
            wanted.append(resolution["shadow"])
    return config_store().bodies(wanted)


@bp.post("/ofrep/v1/evaluate/flags/<role>")
@require("caller", "gatekeeper")
def evaluate_flag(role: str) -> ResponseReturnValue:
    """OFREP single evaluation: which config serves `role` for the context's targeting key."""
    key, context = read_context(_body())
    include = _wants_body()
    cache = services_of(current_app).cache
    record, stale = cache.get(role)
    if record is None:
        if not cache.loaded:
            raise StoreUnavailable("bindings not loaded yet and Redis did not answer")
        record = uncached(role)
    resolution = evaluate_one(current_app, role, record, key, context, stale,
                              principal().name)
    # Logged and counted as a resolve, like GET /v1/resolve.
    g.resolution = resolution
    return current_app.response_class(
        single_payload(resolution, _bodies([resolution]) if include else None),
        mimetype="application/json")


@bp.post("/ofrep/v1/evaluate/flags")
@require("caller", "gatekeeper")
def evaluate_flags() -> ResponseReturnValue:
    """OFREP bulk evaluation: every role this token may act on, with an ETag for polling."""
    key, context = read_context(_body())
    include = _wants_body()
    cache = services_of(current_app).cache
    records, stale = cache.all()
    if not records and not cache.loaded:
        raise StoreUnavailable("bindings not loaded yet and Redis did not answer")
    resolutions = evaluate_all(records, key, context, stale, may_act_on)
    payload, tag = bulk_payload(resolutions, _bodies(resolutions) if include else None)
    if etag_matches(request.headers.get("If-None-Match"), tag):
        # The provider keeps the evaluations it has: nothing newly assigned to count.
        response = current_app.response_class(status=304)
    else:
        count_all(current_app, resolutions, records, principal().name)
        # Now with each evaluation's run id; the tag stays the evaluations' own.
        payload, _ = bulk_payload(resolutions, _bodies(resolutions) if include else None)
        response = current_app.response_class(payload, mimetype="application/json")
    response.headers["ETag"] = tag
    return response


@bp.errorhandler(OfrepError)
def _ofrep_error(exc: OfrepError) -> Response:
    return _json(failure(_flag_key(), exc), exc.status)


@bp.errorhandler(RolegateError)
def _rolegate_error(exc: RolegateError) -> Response:
    # rolegate's own refusals, in OFREP's words: what a provider reads.
    if isinstance(exc, NotFound | Archived):
        error = OfrepError(404, "FLAG_NOT_FOUND", exc.message)
    elif isinstance(exc, StoreUnavailable):
        error = OfrepError(500, "GENERAL", exc.message)
    elif exc.status in (401, 403):
        # OFREP gives these no body; the details still help a human reading the log.
        return _json({"errorDetails": exc.message}, exc.status)
    else:
        error = OfrepError(exc.status, "GENERAL", exc.message)
    g.error = {"code": exc.code, "details": exc.details}
    return _json(failure(_flag_key(), error), error.status)


def _flag_key() -> str | None:
    """The flag key of a single evaluation (errors name it); None for bulk."""
    args = request.view_args or {}
    role = args.get("role")
    return role if isinstance(role, str) else None


def init_app(app: Flask) -> None:
    """Put the OFREP fast path in front of Flask (router.api.ofrep_fast)."""
    ofrep_fast.init_app(app)
