"""POST /v1/restore-snapshot: write back the roles Redis lost, from this router's table.

When Redis loses data (router.server.cache, bindings.table_guard) every router
keeps serving its last good binding of each lost role, marked stale, and
/healthz says `redis_data_lost`. This is the operator's one step out
(`rolegate bindings restore-snapshot`): the worker that answers writes each
lost role's newest kept record, over its own copy and those every other worker
published (bindings.kept_copies), back into Redis one version above it, with a
`restore_snapshot` history entry, and every router takes it at its next poll.
Two workers holding one version with different bindings is refused (409)
naming the roles, with nothing written.
With `"discard": true` the lost roles are written back archived instead
(`discard_snapshot`), so they leave every router's table as an archive would.
Nothing lost answers 200 with nothing written.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings import kept_copies
from bindings.recovery import write_back
from router.api.bodies import json_body, parse
from router.server.auth import actor, principal, require
from router.server.cache import BindingCache
from router.server.errors import Forbidden
from router.server.services import services_of

bp = Blueprint("restore_snapshot", __name__)

DEFAULT_REASON = "Redis lost data; wrote back the router's last good table"


class RestoreRequest(BaseModel):
    """Body of POST /v1/restore-snapshot (every field optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    reason: str = Field(DEFAULT_REASON, min_length=1, max_length=2000)
    #: Archive the lost roles instead of bringing them back.
    discard: bool = False


def newest_held(cache: BindingCache) -> tuple[kept_copies.Copy, dict[str, str], int]:
    """The newest copy of each lost role any worker holds, the lost roles (with why), and
    the generation to write at: what restore-snapshot and accept-redis both start from."""
    generation, records, lost = cache.guarded()
    own = kept_copies.Copy({role: records[role] for role in lost if role in records},
                           {role: cache.archived[role] for role in lost
                            if role not in records and role in cache.archived})
    kept = kept_copies.newest(cache.store.connection, own)
    lost.update({role: f"held at version {version} by another worker"
                 for role, version in [*((r, rec.version) for r, rec in kept.records.items()),
                                       *kept.archived.items()] if role not in lost})
    return kept, lost, max(cache.kept_generation, cache.generation, generation)


@bp.post("/v1/restore-snapshot")
@require()
def restore_snapshot() -> ResponseReturnValue:
    """Write each role Redis lost back from this worker's kept table (archived with discard)."""
    body = parse(RestoreRequest, json_body())
    if principal().roles is not None:
        raise Forbidden("restoring the table writes every lost role: it needs an operator "
                        "token not limited to some roles")
    cache = services_of(current_app).cache
    kept, lost, generation = newest_held(cache)
    done = write_back(cache.store, kept.records, actor=actor(), reason=body.reason,
                      discard=body.discard, archived=kept.archived, generation=generation)
    cache.refresh()  # this worker serves the written table now; the others at their poll
    return jsonify({"restored": {} if body.discard else done.written,
                    "discarded": done.written if body.discard else {},
                    "skipped": done.skipped, "lost": lost,
                    "still_lost": sorted(cache.lost)})
