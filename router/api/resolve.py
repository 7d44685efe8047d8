"""GET /v1/resolve/<role>: which config serves role R for job K.

The hot path: served from the worker's in-process binding copy, no Redis read.
The plain successful resolve is answered by `router.api.resolve_fast` in front
of Flask, with the same answer; this view answers everything else (drawn-key
decoding, refusals) and is the reference the fast path is tested against.
"""

from __future__ import annotations

import json
import os
from typing import Any

from flask import Blueprint, Flask, current_app, g, request
from flask.typing import ResponseReturnValue

from bindings.errors import Archived, NotFound, StoreUnavailable
from bindings.models import ATTRIBUTE_NAME_PATTERN, VersionedBinding, validate_role_name
from rolegate.routing import new_key, resolve
from rolegate.trace import MAX_ATTRIBUTES
from router.api import resolve_fast
from router.api.configs import config_store
from router.api.exposures import count_resolution
from router.server.auth import principal, require
from router.server.errors import BadRequest
from router.server.services import services_of

bp = Blueprint("resolve", __name__)

MAX_KEY_LENGTH = 500
#: `?attr.tenant=internal`: the job's attributes, for the role's targeting rules.
ATTRIBUTE_PREFIX = "attr."
MAX_ATTRIBUTE_VALUE = 200


def attributes_arg() -> dict[str, str] | None:
    """The job's attributes from `?attr.<name>=<value>`; a 400 naming a bad one."""
    attributes: dict[str, str] = {}
    for param, values in request.args.lists():
        if not param.startswith(ATTRIBUTE_PREFIX):
            continue
        name = param[len(ATTRIBUTE_PREFIX):]
        if not ATTRIBUTE_NAME_PATTERN.match(name):
            raise BadRequest(f"{param}: an attribute name is 1-64 letters, digits, '_', '.', "
                             "'-'", field=param)
        if len(values) != 1:
            raise BadRequest(f"{param}: given {len(values)} times; give it once", field=param)
        if len(values[0]) > MAX_ATTRIBUTE_VALUE:
            raise BadRequest(f"{param}: at most {MAX_ATTRIBUTE_VALUE} characters", field=param)
        attributes[name] = values[0]
    if len(attributes) > MAX_ATTRIBUTES:
        raise BadRequest(f"at most {MAX_ATTRIBUTES} attr.<name> parameters", field="attr")
    return attributes or None


@bp.get("/v1/resolve/<role>")
@require("caller", "gatekeeper")
def resolve_role(role: str) -> ResponseReturnValue:
    """Resolve `role` for the job key in `?key=` (drawn here when absent)."""
    key = request.args.get("key")
    if key is None or key == "":
        key = new_key()
    elif len(key) > MAX_KEY_LENGTH:
        raise BadRequest(f"key: at most {MAX_KEY_LENGTH} characters", field="key")
    cache = services_of(current_app).cache
    record, stale = cache.get(role)
    if record is None:
        if not cache.loaded:
            raise StoreUnavailable("bindings not loaded yet and Redis did not answer")
        # Rare path: an archived role (410 with its reason), an unknown one (404),
        # or one created a moment ago that this worker's copy has not seen yet.
        record = uncached(role)
    # Most resolves carry only ?key=: skip the attribute walk for them.
    attributes = attributes_arg() if len(request.args) > ("key" in request.args) else None
    resolution = resolve(role, record.binding, record.version, key, stale=stale,
                         attributes=attributes)
    count_resolution(current_app, role, resolution, record.binding, principal().name)
    # The logs and metrics hooks read the decision from here after the response.
    g.resolution = resolution
    answer: dict[str, Any] = dict(resolution)
    include = request.args.get("include")
    if include is not None:
        _add_bodies(answer, include)
    # The hot path: json.dumps straight into the response skips jsonify's
    # provider lookups (about a tenth of this view's cost).
    response = current_app.response_class(json.dumps(answer, separators=(",", ":")),
                                          mimetype="application/json")
    # Which worker answered: lets an operator (and the tests) see that a change
    # reached every gunicorn worker, not just the one that took the write.
    response.headers["X-Rolegate-Worker"] = str(os.getpid())
    return response


def _add_bodies(answer: dict[str, Any], include: str) -> None:
    """`?include=body`: the config's body (and the shadow's), read from the config registry."""
    if include != "body":
        raise BadRequest(f"include: only 'body' is known, got {include!r}", field="include")
    wanted = [answer["config"]] + ([answer["shadow"]] if answer["shadow"] else [])
    bodies = config_store().bodies(wanted)
    answer["body"] = bodies.get(answer["config"])
    if answer["shadow"]:
        answer["shadow_body"] = bodies.get(answer["shadow"])


def uncached(role: str) -> VersionedBinding:
    """A role this worker's copy lacks: Archived (410) or NotFound, read from Redis."""
    try:
        validate_role_name(role)
        record: VersionedBinding = services_of(current_app).store.get(role)
    except (ValueError, StoreUnavailable):
        # An unusable name, or no Redis to ask: the copy's answer stands.
        raise NotFound(f"no binding for role {role!r}", role=role) from None
    at = services_of(current_app).cache.archived.get(role)
    if at is not None and record.version < at:
        # Archived here; Redis lost that (a backup from before): not served (bindings.table_guard).
        raise Archived(f"role {role!r} was archived at version {at}; Redis lost that and "
                       f"shows version {record.version} live", role=role)
    return record


def init_app(app: Flask) -> None:
    """Put the resolve fast path in front of the app (router.api.resolve_fast)."""
    resolve_fast.init_app(app)
