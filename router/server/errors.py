"""Every error the API returns is JSON: {"error": {"code", "message", "details"}}.

One handler for rolegate's own exceptions (each carries its status), one for Redis
errors a store did not translate (the same 503 it would give), one for
pydantic validation failures, one for Werkzeug's HTTP exceptions. There is no
catch-all: an unexpected exception is a bug and should look like one in the logs.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from flask import Flask, Response, g, has_request_context, jsonify, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from bindings.errors import RolegateError
from bindings.redis_errors import redis_errors
from router.server.otlp_status import PROTOBUF, encode_status, wants_status

log = logging.getLogger("rolegate")


class BadRequest(RolegateError):
    """The request itself is malformed (not JSON, wrong shape, bad parameter)."""

    status = 400
    code = "bad_request"


class Unauthorized(RolegateError):
    """No token, or one the server does not know."""

    status = 401
    code = "unauthorized"


class Forbidden(RolegateError):
    """A known token whose scope does not allow this call."""

    status = 403
    code = "forbidden"


class HostNotAllowed(RolegateError):
    """The Host header names neither this router's address nor an allowed name."""

    status = 400
    code = "host_not_allowed"


class QuotaExceeded(RolegateError):
    """The token went over its ingest quota for this second; the answer carries Retry-After."""

    status = 429
    code = "quota_exceeded"


def error_response(status: int, code: str, message: str, details: Any = None) -> Response:
    """Render the one error shape every client can rely on.

    The exception: a protobuf OTLP export is answered with the protobuf
    `google.rpc.Status` OTLP/HTTP prescribes (`router.server.otlp_status`).
    """
    if has_request_context():
        # What the metrics count, whatever the body's encoding.
        g.error = {"code": code, "details": details or {}}
        if wants_status(request.path, request.mimetype):
            return Response(encode_status(status, message), status=status, mimetype=PROTOBUF)
    response = jsonify({"error": {"code": code, "message": message, "details": details or {}}})
    response.status_code = status
    return response


def validation_details(exc: ValidationError) -> list[dict[str, str]]:
    """Pydantic's errors as [{"field", "message"}], the field dotted from its location."""
    out = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err.get("loc", ()))
        out.append({"field": field, "message": err.get("msg", "invalid")})
    return out


def _summary(details: list[dict[str, str]]) -> str:
    parts = [f"{d['field']}: {d['message']}" if d["field"] else d["message"] for d in details]
    return "; ".join(parts) or "invalid input"


def init_app(app: Flask) -> None:
    """Register the JSON error handlers."""

    @app.errorhandler(RolegateError)
    def _rolegate_error(exc: RolegateError) -> Response:
        response = error_response(exc.status, exc.code, exc.message, exc.details)
        retry_after = exc.details.get("retry_after_s")
        if isinstance(retry_after, int):
            response.headers["Retry-After"] = str(retry_after)
        return response

    @app.errorhandler(redis.RedisError)
    def _redis_error(exc: redis.RedisError) -> Response:
        # A Redis failure a store did not translate: the same 503 it would have given.
        try:
            with redis_errors():
                raise exc
        except RolegateError as translated:
            return error_response(translated.status, translated.code, translated.message,
                                  translated.details)
        except redis.RedisError:
            log.exception("unexpected Redis error")
            return error_response(500, "internal", "unexpected Redis error")

    @app.errorhandler(ValidationError)
    def _validation_error(exc: ValidationError) -> Response:
        details = validation_details(exc)
        return error_response(422, "invalid", _summary(details), {"errors": details})

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        code = (exc.name or "error").lower().replace(" ", "_")
        response = error_response(exc.code or 500, code, exc.description or exc.name or "")
        if exc.code == 405:
            allowed = exc.get_headers() if hasattr(exc, "get_headers") else []
            for header, value in allowed:
                if header.lower() == "allow":
                    response.headers["Allow"] = value
        return response
