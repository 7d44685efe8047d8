"""/healthz: ok, degraded or failing for anyone; per-dependency details for a token holder.

The probes an orchestrator acts on are separate (`/livez`, `/readyz`, below):
/healthz is for alerting, and a router that serves its kept table while Redis
is down is `failing` there but still answers resolves.

- ok (200): Redis answers and accepts writes.
- degraded (200): Redis answers but refuses writes (out of memory, a read-only
  replica after a failover, too few replicas, busy with a script, ...).
  Resolves are still served from the workers' tables, so a load balancer
  should keep the router; alert on it.
- degraded (200) too when Redis lost data: some role this worker holds is gone
  from Redis or older there (bindings.table_guard). Its last good binding is
  served, marked stale; `checks.bindings.condition` is `redis_data_lost` and
  `rolegate bindings restore-snapshot` writes the kept table back.
- failing (503): Redis does not answer at all.

The write check is one SET of a short-lived key: the only way to learn that
Redis would refuse a write (NOREPLICAS, OOM) is to ask it to make one. A Redis
at its memory limit refuses some writes and takes others, so the answer stays
degraded for ROLEGATE_HEALTH_HOLD seconds (15) after this worker last saw any
write refused, its own probe's or a request's (`redis.refused_s_ago`).

Without a token (on a server with tokens) the answer is only `{"status"}`. The
details name Redis's host and port in its error text, which is nobody else's
business. With any valid token, or on an open server, the checks are included:
Redis (ping, latency, the refusal's `condition`) and this worker's binding
copy. The copy is loaded here if this worker has not served anything yet, so a
healthy fresh worker reports `bindings.ok: true`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from flask import Blueprint, Flask, Response, current_app, g, jsonify
from flask.typing import ResponseReturnValue
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from bindings.errors import RolegateError
from bindings.redis_errors import refusal_condition
from bindings.table_guard import DATA_LOST
from bindings.table_guard import summary as lost_summary
from gatekeeper.store.heartbeat import HeartbeatStore
from router.server.auth import bearer_token
from router.server.services import services_of
from router.server.tokens import TokenTable

bp = Blueprint("health", __name__)

#: The key the write check sets (expires by itself).
PROBE_KEY = "rolegate:healthcheck"
PROBE_TTL_MS = 60_000
REFUSALS_KEY = "rolegate.refusals"


def _may_see_details() -> bool:
    table: TokenTable = services_of(current_app).tokens
    if table.open:
        return True
    presented = bearer_token()
    return presented is not None and table.lookup(presented) is not None


def _gatekeeper_check() -> dict[str, Any]:
    """Whether a gatekeeper is judging. Informational: it never fails the router's probe
    (a router with no gatekeeper still serves every resolve), so alert on it instead."""
    try:
        summary = HeartbeatStore(services_of(current_app).redis).summary()
    except RolegateError as exc:
        return {"ok": False, "status": "unknown", "error": exc.message}
    return {"ok": summary["status"] == "ok", "status": summary["status"],
            "leader": summary["leader"], "age_s": summary["age_s"], "text": summary["text"]}


class Refusals:
    """The last write this worker saw Redis refuse (OOM, READONLY, ...), and when."""

    def __init__(self) -> None:
        self.condition: str | None = None
        self.at = 0.0

    def note(self, condition: str) -> None:
        """Remember a refusal seen now."""
        self.condition, self.at = condition, time.monotonic()

    def recent(self, hold_s: float) -> tuple[str, float] | None:
        """(condition, seconds ago) of a refusal seen less than `hold_s` ago, else None."""
        ago = time.monotonic() - self.at
        return None if self.condition is None or ago >= hold_s else (self.condition, ago)


def _refusals(app: Flask) -> Refusals:
    found: Refusals = app.extensions[REFUSALS_KEY]
    return found


def _note_refusal(response: Response) -> Response:
    """After any request: remember a write Redis refused (a 503 naming its condition)."""
    if response.status_code == 503:
        error = g.get("error") or {}
        condition = (error.get("details") or {}).get("condition")
        if error.get("code") == "store_unavailable" and isinstance(condition, str):
            _refusals(current_app).note(condition)
    return response


def init_app(app: Flask) -> None:
    """Give the app its refusal memory, fed by every request's answer."""
    app.extensions[REFUSALS_KEY] = Refusals()
    app.after_request(_note_refusal)


def ping_every_master(cluster: RedisCluster) -> None:
    """PING each master of `cluster` on its own connection; one that does not answer raises.

    The cluster client's own PING to every primary retries a dead master for seconds
    (4-10 s here) before it raises, and a probe or an operator waits on it. A master
    that does not answer here is asked about once more after the slot map is read
    again, so a master a failover replaced is not blamed for the one that died.
    """
    try:
        _ping_primaries(cluster)
    except (redis.ConnectionError, redis.TimeoutError):
        try:
            cluster.nodes_manager.initialize()
        except RedisClusterException as exc:  # not a RedisError: no node gave a slot map
            raise redis.ConnectionError(f"no cluster node answered with its slots: {exc}"
                                        ) from exc
        _ping_primaries(cluster)


def _ping_primaries(cluster: RedisCluster) -> None:
    for node in cluster.get_primaries():  # type: ignore[no-untyped-call]
        connection = node.redis_connection or cluster.get_redis_connection(node)
        connection.ping()


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """Ping Redis (every master of a Cluster), make one small write; with a token, details."""
    services = services_of(current_app)
    started = time.perf_counter()
    status = "ok"
    try:
        if isinstance(services.redis, RedisCluster):
            # Each master holds some roles' keys: one that does not answer is an
            # outage for those roles, so every master must answer.
            ping_every_master(services.redis)
        else:
            services.redis.ping()
        services.redis.set(PROBE_KEY, repr(time.time()), px=PROBE_TTL_MS)
        redis_check: dict[str, Any] = {
            "ok": True, "latency_ms": round((time.perf_counter() - started) * 1e3, 2)}
    except redis.RedisError as exc:
        condition = refusal_condition(exc)
        redis_check = {"ok": False, "error": str(exc)}
        if condition is not None:
            redis_check["condition"] = condition
            status = "degraded"
            _refusals(current_app).note(condition)
        else:
            status = "failing"
    else:
        held = _refusals(current_app).recent(services.settings.health_hold_s)
        if held is not None:
            # The probe got through, but a write was refused a moment ago: Redis
            # near its limit refuses some writes and takes others, and one lucky
            # probe must not call it healthy (it flipped 13 times in 20 s).
            condition, ago = held
            status = "degraded"
            redis_check.update(ok=False, condition=condition, refused_s_ago=round(ago, 3),
                               error=f"Redis refused a write ({condition}) {ago:.1f} s ago")
    cache = services.cache
    cache.all()  # loads this worker's copy (and starts its refresh) if not yet done
    if redis_check["ok"]:
        # Poll now (one GET when nothing moved): a Redis that came back empty,
        # even between two of this worker's polls, is named here at once.
        cache.refresh()
    lost = dict(cache.lost)
    if lost and status == "ok":
        # Resolves are served (the held records, stale); the table must be restored.
        status = "degraded"
    body: dict[str, Any] = {"status": status}
    if _may_see_details():
        bindings_check: dict[str, Any] = {
            "ok": cache.loaded and not lost, "stale": cache.stale or bool(lost),
            "generation": cache.generation}
        if lost:
            bindings_check.update(condition=DATA_LOST, lost_roles=sorted(lost),
                                  kept_generation=cache.kept_generation,
                                  message=lost_summary(lost))
        body["checks"] = {"redis": redis_check, "bindings": bindings_check,
                          "gatekeeper": _gatekeeper_check()}
    # Which worker answered, as resolves say: each gunicorn worker holds its own table,
    # and an operator checking that every worker sees a change needs to tell them apart.
    return jsonify(body), 503 if status == "failing" else 200, {
        "X-Rolegate-Worker": str(os.getpid())}


@bp.get("/livez")
def livez() -> ResponseReturnValue:
    """The worker answers HTTP (liveness, startup): nothing else, so no outage restarts it."""
    return jsonify({"status": "alive"})


@bp.get("/readyz")
def readyz() -> ResponseReturnValue:
    """Whether this worker can answer resolves: 200 with a binding table, stale or not.

    A router serving its kept table while Redis is down stays ready (callers
    and OFREP keep their answers; /healthz says failing, for alerting); one
    that has no table at all (Redis silent since it started, nothing kept) is not.
    """
    cache = services_of(current_app).cache
    cache.all()  # loads this worker's copy (from Redis, else the kept file) if not yet done
    if not cache.loaded:
        return jsonify({"status": "not_ready",
                        "reason": "no binding table yet: Redis has not answered since this "
                                  "worker started and no table is kept in its data "
                                  "directory"}), 503
    return jsonify({"status": "ready", "stale": cache.stale or bool(cache.lost)})
