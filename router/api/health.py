"""/healthz: up or down for anyone; per-dependency details for a token holder.

Without a token (on a server with tokens) the answer is only `{"status"}`: ok
with 200, failing with 503. The details name Redis's host and port in its
error text, which is nobody else's business. With any valid token, or on an
open server, the checks are included: Redis (ping and latency) and this
worker's binding copy. The copy is loaded here if this worker has not served
anything yet, so a healthy fresh worker reports `bindings.ok: true`.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from redis.cluster import RedisCluster

from router.server.auth import bearer_token
from router.server.tokens import TokenTable

bp = Blueprint("health", __name__)


def _may_see_details() -> bool:
    table: TokenTable = current_app.extensions["rolegate"].tokens
    if table.open:
        return True
    presented = bearer_token()
    return presented is not None and table.lookup(presented) is not None


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """Ping Redis (every master of a Cluster); with a token, each check and the copy's state."""
    services = current_app.extensions["rolegate"]
    started = time.perf_counter()
    try:
        if isinstance(services.redis, RedisCluster):
            # Each master holds some roles' keys: one that does not answer is an
            # outage for those roles, so every master must answer.
            services.redis.ping(target_nodes=RedisCluster.PRIMARIES)
        else:
            services.redis.ping()
        redis_check: dict[str, Any] = {
            "ok": True, "latency_ms": round((time.perf_counter() - started) * 1e3, 2)}
    except redis.RedisError as exc:
        redis_check = {"ok": False, "error": str(exc)}
    # Redis is the one dependency; a stale binding copy follows from it being down.
    healthy = bool(redis_check["ok"])
    body: dict[str, Any] = {"status": "ok" if healthy else "failing"}
    if _may_see_details():
        cache = services.cache
        cache.all()  # loads this worker's copy (and starts its refresh) if not yet done
        body["checks"] = {
            "redis": redis_check,
            "bindings": {"ok": cache.loaded, "stale": cache.stale,
                         "generation": cache.generation},
        }
    return jsonify(body), 200 if healthy else 503
