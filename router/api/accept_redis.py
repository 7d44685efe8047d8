"""POST /v1/accept-redis: serve Redis's table after it was restored from a backup on purpose.

A Redis restored from a backup is older than the routers' tables: every role
written after the backup is at a lower version in Redis, or missing, which
each router (rightly: bindings.table_guard) takes for lost data, keeping its
own copy and saying `redis_data_lost`. When the restore is what the operator
meant, this is the one step that makes every router serve Redis's table
(`rolegate bindings accept-redis`): for each role any worker holds above
Redis (bindings.kept_copies), Redis's own record is written again one version
above the newest held one, with an `accept_redis` history entry; a role Redis
has no record of is written archived. Every router takes the result at its
next poll, as it would any newer record.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings.recovery import accept_redis as accept
from router.api.bodies import json_body, parse
from router.api.restore_snapshot import newest_held
from router.server.auth import actor, principal, require
from router.server.errors import Forbidden
from router.server.services import services_of

bp = Blueprint("accept_redis", __name__)

DEFAULT_REASON = "Redis was restored from a backup; its table accepted over the routers'"


class AcceptRequest(BaseModel):
    """Body of POST /v1/accept-redis (every field optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    reason: str = Field(DEFAULT_REASON, min_length=1, max_length=2000)


@bp.post("/v1/accept-redis")
@require()
def accept_redis() -> ResponseReturnValue:
    """Make Redis's record of every role the routers hold above it the newest version."""
    body = parse(AcceptRequest, json_body())
    if principal().roles is not None:
        raise Forbidden("accepting Redis's table writes every role the routers hold: it "
                        "needs an operator token not limited to some roles")
    cache = services_of(current_app).cache
    kept, lost, generation = newest_held(cache)
    done = accept(cache.store, kept.records, actor=actor(), reason=body.reason,
                  archived=kept.archived, generation=generation)
    cache.refresh()  # this worker serves Redis's table now; the others at their poll
    return jsonify({"accepted": done.written, "skipped": done.skipped, "lost": lost,
                    "still_lost": sorted(cache.lost)})
