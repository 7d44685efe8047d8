"""The gatekeeper's lease and heartbeat over HTTP: several gatekeepers may run, one leads.

POST /v1/gatekeeper/lease {"holder", "ttl_s"}: 200 held (taken or renewed),
409 held by another. DELETE /v1/gatekeeper/lease {"holder"}: 200 released, 409
when the lease is not this holder's. GET shows who holds it.

POST /v1/gatekeeper/heartbeat {"holder", "leader", "interval_s", "roles_judged",
"errors", "dry_run"}: a gatekeeper says it ticked (stamped with Redis's clock).
GET /v1/gatekeeper/heartbeat: is anyone judging (`gatekeeper.heartbeat`).
"""

from __future__ import annotations

from typing import Annotated

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings.errors import Conflict
from bindings.lease import LeaseStore
from gatekeeper.store.heartbeat import HeartbeatStore
from rolegate.trace import JsonNumber
from router.api.bodies import json_body, parse
from router.server.auth import require
from router.server.services import services_of

bp = Blueprint("lease", __name__)

EXTENSION = "rolegate.lease"
HEARTBEAT_EXTENSION = "rolegate.heartbeat"


class LeaseRequest(BaseModel):
    """Body of POST /v1/gatekeeper/lease."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    holder: str = Field(min_length=1, max_length=200)
    ttl_s: JsonNumber = Field(15.0, gt=0.0, le=3600.0)


class ReleaseRequest(BaseModel):
    """Body of DELETE /v1/gatekeeper/lease."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    holder: str = Field(min_length=1, max_length=200)


class HeartbeatRequest(BaseModel):
    """Body of POST /v1/gatekeeper/heartbeat: one gatekeeper's tick, as it saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    holder: str = Field(min_length=1, max_length=200)
    #: Whether this process held the lease (and so judged) on this tick.
    leader: bool
    interval_s: float = Field(gt=0.0, le=86_400.0)
    roles_judged: int = Field(0, ge=0, le=1_000_000)
    #: What went wrong on this tick (a role whose view failed, a router error).
    errors: list[Annotated[str, Field(max_length=500)]] = Field(default_factory=list,
                                                                max_length=50)
    dry_run: bool = False


def init_app(app: Flask) -> None:
    """Keep one LeaseStore and one HeartbeatStore on the app's Redis connection."""
    app.extensions[EXTENSION] = LeaseStore(services_of(app).redis)
    app.extensions[HEARTBEAT_EXTENSION] = HeartbeatStore(services_of(app).redis)


def heartbeats() -> HeartbeatStore:
    """The app's HeartbeatStore (the dashboard, /healthz and /metrics read it too)."""
    store: HeartbeatStore = current_app.extensions[HEARTBEAT_EXTENSION]
    return store


def _leases() -> LeaseStore:
    store: LeaseStore = current_app.extensions[EXTENSION]
    return store


@bp.post("/v1/gatekeeper/lease")
@require("gatekeeper")
def acquire() -> ResponseReturnValue:
    """Take or renew the lease for `holder`; 409 when someone else holds it."""
    body = parse(LeaseRequest, json_body(allow_empty=False))
    leases = _leases()
    # At least 1 ms: a ttl_s under half a millisecond would round to PX 0, which Redis refuses.
    if not leases.acquire(body.holder, max(1, round(body.ttl_s * 1000))):
        state = leases.state()
        raise Conflict("the gatekeeper lease is held by another holder",
                       holder=state.holder, ttl_ms=state.ttl_ms)
    state = leases.state()
    return jsonify({"held": True, "holder": body.holder, "ttl_ms": state.ttl_ms})


@bp.delete("/v1/gatekeeper/lease")
@require("gatekeeper")
def release() -> ResponseReturnValue:
    """Release the lease, only when `holder` holds it."""
    body = parse(ReleaseRequest, json_body(allow_empty=False))
    leases = _leases()
    if not leases.release(body.holder):
        state = leases.state()
        raise Conflict("the gatekeeper lease is not held by this holder",
                       holder=state.holder, ttl_ms=state.ttl_ms)
    return jsonify({"released": True, "holder": body.holder})


@bp.get("/v1/gatekeeper/lease")
@require("caller", "reviewer", "gatekeeper")
def show() -> ResponseReturnValue:
    """Who holds the lease, and for how many more milliseconds."""
    state = _leases().state()
    return jsonify({"holder": state.holder, "ttl_ms": state.ttl_ms})


@bp.post("/v1/gatekeeper/heartbeat")
@require("gatekeeper")
def beat() -> ResponseReturnValue:
    """Record a gatekeeper's tick at Redis's time; answers the summary after it."""
    body = parse(HeartbeatRequest, json_body(allow_empty=False))
    return jsonify(heartbeats().beat(body.holder, leader=body.leader,
                                     interval_s=body.interval_s,
                                     roles_judged=body.roles_judged, errors=body.errors,
                                     dry_run=body.dry_run))


@bp.get("/v1/gatekeeper/heartbeat")
@require("caller", "reviewer", "gatekeeper")
def heartbeat_summary() -> ResponseReturnValue:
    """Is anyone judging: the leader, its last tick, roles judged and errors."""
    return jsonify(heartbeats().summary())
