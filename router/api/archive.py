"""Archiving a role: DELETE /v1/bindings/<role>, and POST /v1/bindings/<role>/restore.

An archived role leaves the binding table (nothing lists, resolves or moves it;
a resolve or a read answers 410 with the reason) but keeps its last binding and
its whole history, readable as before. Archive and restore are versioned
changes like any other: one compare-and-set writes the history entry and flips
the role in or out of the table together.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings.errors import Conflict
from bindings.store import ArchiveNote, BindingStore
from router.api.bodies import json_body, parse
from router.api.params import if_match, role_param
from router.server.auth import actor, require
from router.server.services import services_of

bp = Blueprint("archive", __name__)


class ArchiveRequest(BaseModel):
    """Body of DELETE /v1/bindings/<role> and POST .../restore: why (recorded in history)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(min_length=1, max_length=2000)


def _store() -> BindingStore:
    store: BindingStore = services_of(current_app).store
    return store


def _reason() -> ArchiveRequest:
    """The reason from the JSON body, or from `?reason=` (a DELETE body is often dropped)."""
    body = json_body()
    if body == {} and "reason" in request.args:
        body = {"reason": request.args["reason"]}
    return parse(ArchiveRequest, body)


def _expected(role: str, current: int) -> int:
    """The version to write against: If-Match when sent (409 when stale), else `current`."""
    expected = if_match("binding")
    if expected is not None and expected != current:
        raise Conflict(f"role {role!r} is at version {current}, not {expected}", role=role,
                       current_version=current, expected_version=expected)
    return current


@bp.delete("/v1/bindings/<role>")
@require()
def archive(role: str) -> ResponseReturnValue:
    """Archive the role: out of the table, resolves answer 410, history kept."""
    role = role_param(role)
    body = _reason()
    store = _store()
    current = store.get(role)
    expected = _expected(role, current.version)
    note = ArchiveNote(reason=body.reason, actor=actor(), time=store.clock(),
                       version=expected + 1)
    record = store.write(role, current.binding, expected_version=expected, actor=note.actor,
                         action="archive", reason=body.reason, archive=note)
    services_of(current_app).cache.drop(role, record.version)
    return jsonify({**record.model_dump(mode="json"), "archived": note.model_dump()})


@bp.post("/v1/bindings/<role>/restore")
@require()
def restore(role: str) -> ResponseReturnValue:
    """Bring an archived role back, with the binding it had, as a new version."""
    role = role_param(role)
    body = _reason()
    store = _store()
    last, note = store.get_any(role)
    if note is None:
        raise Conflict(f"role {role!r} is not archived", role=role,
                       current_version=last.version)
    expected = _expected(role, last.version)
    # A fresh window: the traces before the archive are not this stage's evidence.
    binding = last.binding.with_changes(stage_since=store.clock())
    record = store.write(role, binding, expected_version=expected, actor=actor(),
                         action="unarchive", reason=body.reason, archive="restore",
                         details={"archived": note.model_dump()})
    services_of(current_app).cache.put(record)
    response = jsonify(record.model_dump(mode="json"))
    response.headers["ETag"] = f'"{record.version}"'
    return response
