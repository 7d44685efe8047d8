"""The operator API over the binding table: read, replace, roll back, step a rollout.

Every change is a compare-and-set against the version the writer read (the
`If-Match` header, or the version this request read), recorded with who and why.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings.bucketing import new_salt, with_bucketing
from bindings.errors import Archived, Conflict, NotFound, PreconditionRequired
from bindings.models import Binding, VersionedBinding
from bindings.store import archived_error
from bindings.table_guard import DATA_LOST, lost_roles
from gatekeeper.machine.details import EntryDetails
from gatekeeper.machine.stages import Event, apply, check_holds
from rolegate.trace import JsonNumber, PositiveJsonInt
from router.api.bodies import json_body, parse
from router.api.configs import snapshot_json
from router.api.idempotency import current as idempotency
from router.api.idempotency import idempotent
from router.api.offline import guard_live_candidate
from router.api.params import bodies_arg, if_match, int_arg, role_param, view_arg
from router.server.auth import actor, may_act_on, require
from router.server.services import services_of

bp = Blueprint("bindings", __name__)
#: Set on a read answered from a router's kept record because Redis lost the role.
STALE_HEADER = "X-Rolegate-Stale"


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reason: str = Field(min_length=1, max_length=2000)
    #: Numbers behind an automated decision (a gatekeeper's under `gatekeeper`, validated
    #: as `DecisionDetails`), kept in the history entry as validated.
    details: EntryDetails = Field(default_factory=EntryDetails)


class RollbackRequest(_Action):
    """Body of POST .../rollback: zero the canary, or restore `to_version`."""

    to_version: PositiveJsonInt | None = None


class CanaryRequest(_Action):
    """Body of POST .../canary: set the candidate's share directly."""

    share: JsonNumber = Field(gt=0.0, le=1.0)


class PutRequest(BaseModel):
    """Body of PUT /v1/bindings/<role> when it carries a reason beside the binding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    binding: Binding
    reason: str = Field("replaced through the API", min_length=1, max_length=2000)


def _store() -> Any:
    return services_of(current_app).store


def _now() -> float:
    """The time stage starts are stamped with: the store's clock, Redis TIME (`bindings.clock`)."""
    now: float = _store().clock()
    return now


def _bucketed(old: Binding | None, new: Binding, given: set[str]) -> Binding:
    """`new` with its rollout's bucketing (`bindings.bucketing`): ROLEGATE_BUCKETING=1
    keeps new rollouts on version 1 unsalted, as SDKs before bucketing versions route."""
    legacy = services_of(current_app).settings.bucketing == 1
    return with_bucketing(old, new, given, version=1 if legacy else 2,
                          draw=(lambda: None) if legacy else new_salt)


def _cache() -> Any:
    return services_of(current_app).cache


def _record_json(record: VersionedBinding) -> Response:
    response = jsonify(record.model_dump(mode="json"))
    response.headers["ETag"] = f'"{record.version}"'
    return response


def _current(role: str) -> VersionedBinding:
    """The role's binding, which must be the version `If-Match` names when one is sent."""
    current: VersionedBinding = _store().get(role_param(role))
    expected = if_match("binding")
    if expected is not None and expected != current.version:
        raise Conflict(f"role {role!r} is at version {current.version}, not {expected}",
                       role=role, current_version=current.version, expected_version=expected)
    return current


def _written(record: VersionedBinding, status: int = 200) -> tuple[Response, int]:
    _cache().put(record)
    return _record_json(record), status


@bp.get("/v1/bindings")
@require("caller", "reviewer", "gatekeeper")
def list_bindings() -> ResponseReturnValue:
    """Every role's binding; answers 304 when `If-None-Match` names the current generation.

    `?view=client` (the default) gives what resolving reads (`router.api.client_view`);
    `?view=full` every field, for operators and the gatekeeper.
    """
    view, bodies = view_arg(), bodies_arg()
    # Roles Redis lost keep their last good record, marked stale (router.server.cache).
    generation, records, lost = _cache().guarded()
    etag = f'"g{generation}"'
    if request.headers.get("If-None-Match") == etag and not lost:
        response = Response(status=304)
        response.headers["ETag"] = etag
        return response
    # A token limited to some roles sees only those (the ETag is the table's generation).
    body = snapshot_json(generation, {role: rec for role, rec in records.items()
                                      if may_act_on(role)}, view, bodies)
    if lost:
        body["stale"] = True
        body["lost"] = {role: why for role, why in lost.items() if may_act_on(role)}
    response = jsonify(body)
    response.headers["ETag"] = etag
    return response


@bp.get("/v1/bindings/<role>")
@require("caller", "reviewer", "gatekeeper")
def get_binding(role: str) -> ResponseReturnValue:
    """One role's binding with its version (also the ETag).

    While Redis lost the role (bindings.table_guard) it is the kept record the
    table and resolves serve, marked `X-Rolegate-Stale: redis_data_lost`: one
    read must not say 404 while the list shows the role.
    """
    role = role_param(role)
    held, _ = _cache().get(role)
    try:
        record, note = _store().get_any(role)
    except NotFound:
        record, note = None, None
    if held is not None:
        live = {} if record is None or note is not None else {role: record}
        archived = {} if record is None or note is None else {role: record.version}
        if lost_roles({role: held}, live, archived):
            response = _record_json(held)
            response.headers[STALE_HEADER] = DATA_LOST
            return response
    if record is None:
        raise NotFound(f"no binding for role {role!r}", role=role)
    if note is not None:
        raise archived_error(role, note)
    at = _cache().archived.get(role)
    if held is None and at is not None and lost_roles({}, {role: record}, {}, {role: at}):
        # Archived where Redis lost that: out of the list, so out of this read too.
        raise Archived(f"role {role!r} was archived at version {at}; Redis lost that and "
                       f"shows version {record.version} live", role=role)
    return _record_json(record)


@bp.put("/v1/bindings/<role>")
@require()
@idempotent(_written)
def put_binding(role: str) -> ResponseReturnValue:
    """Create a role, or replace one given `If-Match: <version>`."""
    role = role_param(role)
    body = json_body()
    if isinstance(body, dict) and "binding" in body:
        put = parse(PutRequest, body)
        binding, reason = put.binding, put.reason
    else:
        binding, reason = parse(Binding, body), "replaced through the API"
    expected = if_match("binding")
    store = _store()
    try:
        existing: VersionedBinding | None = store.get(role)
    except NotFound:
        existing = None
    if existing is None:
        if expected not in (None, 0):
            raise NotFound(f"no binding for role {role!r} to replace", role=role,
                           current_version=0)
        guard_live_candidate(role, None, binding)
        binding = _bucketed(None, binding, binding.model_fields_set)
        binding = binding.with_changes(stage_since=_now())
        return _written(store.write(role, binding, expected_version=0, actor=actor(),
                                    action="create", reason=reason,
                                    idempotency=idempotency()), 201)
    if expected is None:
        raise PreconditionRequired(
            f"role {role!r} exists: send If-Match: {existing.version} to replace it",
            role=role, current_version=existing.version,
        )
    if expected != existing.version:
        raise Conflict(f"role {role!r} is at version {existing.version}, not {expected}",
                       role=role, current_version=existing.version, expected_version=expected)
    old = existing.binding
    # A replace is a move too: it may not carry a paused or unapproved role forward.
    check_holds(old, binding, "replace")
    guard_live_candidate(role, old, binding)
    binding = _bucketed(old, binding, binding.model_fields_set)
    moved = (old.stage, old.share, old.candidate) != (binding.stage, binding.share,
                                                      binding.candidate)
    binding = binding.with_changes(stage_since=_now() if moved else old.stage_since)
    return _written(store.write(role, binding, expected_version=expected, actor=actor(),
                               action="replace", reason=reason, idempotency=idempotency()))


def _transition(role: str, event: Event, body: _Action, *, share: float | None = None,
                action: str | None = None) -> ResponseReturnValue:
    store = _store()
    current = _current(role)
    move = apply(current.binding, event, _now(), share=share, actor=actor(),
                 reason=body.reason)
    # A role may demand an offline suite pass before its candidate runs on real jobs.
    guard_live_candidate(role, current.binding, move.binding)
    details = {"summary": move.summary, **body.details.as_json()}
    # A rolled-back candidate going live again is a new rollout: it draws its own salt.
    moved = _bucketed(current.binding, move.binding, set())
    return _written(store.write(role, moved, expected_version=current.version,
                               actor=actor(), action=action or event.value, reason=body.reason,
                               details=details, idempotency=idempotency()))


@bp.post("/v1/bindings/<role>/rollback")
@require("gatekeeper")
@idempotent(_written)
def rollback(role: str) -> ResponseReturnValue:
    """Zero the canary, or (with to_version) restore an earlier version as a new one."""
    body = parse(RollbackRequest, json_body())
    if body.to_version is None:
        return _transition(role, Event.ROLLBACK, body)
    store = _store()
    current = _current(role)
    old = store.history_entry(role, body.to_version)
    restored = old.binding.with_changes(stage_since=_now())
    guard_live_candidate(role, current.binding, restored)
    details = {"summary": f"restored version {body.to_version}",
               "restored_version": body.to_version, **body.details.as_json()}
    return _written(store.write(role, restored, expected_version=current.version, actor=actor(),
                               action="restore", reason=body.reason, details=details,
                               idempotency=idempotency()))


@bp.post("/v1/bindings/<role>/canary")
@require()
@idempotent(_written)
def set_canary(role: str) -> ResponseReturnValue:
    """Set the candidate's share (1 means full)."""
    body = parse(CanaryRequest, json_body())
    return _transition(role, Event.SET_SHARE, body, share=body.share, action="canary")


@bp.post("/v1/bindings/<role>/promote")
@require("gatekeeper")
@idempotent(_written)
def promote(role: str) -> ResponseReturnValue:
    """Advance the rollout one step."""
    return _transition(role, Event.ADVANCE, parse(_Action, json_body()), action="promote")


@bp.post("/v1/bindings/<role>/pause")
# The gatekeeper pauses a role that gate.responses holds for a human (resume stays an
# operator's: the human decides).
@require("gatekeeper")
@idempotent(_written)
def pause(role: str) -> ResponseReturnValue:
    """Stop the gatekeeper from moving this role."""
    return _transition(role, Event.PAUSE, parse(_Action, json_body()))


@bp.post("/v1/bindings/<role>/resume")
@require()
@idempotent(_written)
def resume(role: str) -> ResponseReturnValue:
    """Let the gatekeeper move this role again."""
    return _transition(role, Event.RESUME, parse(_Action, json_body()))


@bp.post("/v1/bindings/<role>/approve")
@require()
@idempotent(_written)
def approve(role: str) -> ResponseReturnValue:
    """Approve the step the role stands on, so the gatekeeper may advance past it."""
    return _transition(role, Event.APPROVE, parse(_Action, json_body()))


@bp.get("/v1/bindings/<role>/history")
@require("caller", "reviewer", "gatekeeper")
def history(role: str) -> ResponseReturnValue:
    """The role's changes, newest first (`?limit=&offset=`)."""
    limit = int_arg("limit", None)
    offset = int_arg("offset", 0) or 0
    entries = _store().history(role_param(role), limit=limit, offset=offset)
    return jsonify({"role": role, "entries": [e.model_dump(mode="json") for e in entries]})
