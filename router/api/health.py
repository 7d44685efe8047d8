"""/healthz: ok or failing per dependency, and a non-200 when one fails."""

from __future__ import annotations

import time
from typing import Any

import redis
from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """Ping Redis; report the binding copy's staleness too."""
    services = current_app.extensions["rolegate"]
    started = time.perf_counter()
    try:
        services.redis.ping()
        redis_check: dict[str, Any] = {"ok": True, "latency_ms": round((time.perf_counter() - started) * 1e3, 2)}
    except redis.RedisError as exc:
        redis_check = {"ok": False, "error": str(exc)}
    cache = services.cache
    checks = {
        "redis": redis_check,
        "bindings": {"ok": cache.loaded, "stale": cache.stale, "generation": cache.generation},
    }
    # Redis is the one dependency; a stale binding copy follows from it being down.
    healthy = bool(redis_check["ok"])
    body = {"status": "ok" if healthy else "failing", "checks": checks}
    return jsonify(body), 200 if healthy else 503
