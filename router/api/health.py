"""/healthz: ok or failing per dependency, and a non-200 when one fails."""

from __future__ import annotations

import time
from typing import Any

import redis
from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from redis.cluster import RedisCluster

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """Ping Redis (every master of a Cluster); report the binding copy's staleness too."""
    services = current_app.extensions["rolegate"]
    started = time.perf_counter()
    try:
        if isinstance(services.redis, RedisCluster):
            # Each master holds some roles' keys: one that does not answer is an
            # outage for those roles, so every master must answer.
            services.redis.ping(target_nodes=RedisCluster.PRIMARIES)
        else:
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
