"""The config registry API: a config's spec, the criteria generated from it, and their diff.

    PUT  /v1/configs/<config>                       {"spec"?, "body"?, "description"?}: what
                                                    is left out is kept; "body": null drops it
    GET  /v1/configs                                every registered config id
    GET  /v1/configs/<config>                       the record: spec, criteria, body, version
    GET  /v1/configs/<config>/versions              every kept version, oldest first (summary)
    GET  /v1/configs/<config>/versions/<n>          the record as it was at version n
    GET  /v1/configs/<config>/criteria              the stored criteria
    GET  /v1/configs/<a>/criteria/diff/<b>          added, removed, changed, reworded
    POST /v1/configs/<config>/criteria/check        {"trace": {...}} -> verdict per key
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bindings.models import VersionedBinding
from gatekeeper.checks.criteria import CriteriaDiff, diff, evaluate
from gatekeeper.checks.spec import Spec
from gatekeeper.store.configs import KEEP, ConfigRecord, ConfigStore
from rolegate.body import AgentBody, CompletionBody, check_size
from rolegate.trace import Trace
from router.api.bodies import json_body, parse
from router.api.client_view import client_record
from router.api.params import if_match, version_param
from router.server.auth import actor, require
from router.server.services import services_of

bp = Blueprint("configs", __name__)


class PutConfig(BaseModel):
    """Body of PUT /v1/configs/<config>: a spec (criteria come from it), a body, or both.

    A field left out keeps its stored value (registering a spec keeps the body);
    `"body": null` drops the body, refused while a live role serves it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: Spec | None = None
    body: AgentBody | CompletionBody | None = Field(None, discriminator="mode")
    description: str | None = Field(None, max_length=2000)

    @model_validator(mode="before")
    @classmethod
    def _body_mode(cls, data: Any) -> Any:
        """A body without `mode` is an agent body; a config needs a spec or a body."""
        if isinstance(data, dict):
            if "spec" not in data and "body" not in data:
                raise ValueError("a config needs a spec, a body, or both")
            body = data.get("body")
            if isinstance(body, dict) and "mode" not in body:
                data = {**data, "body": {**body, "mode": "agent"}}
        return data

    @model_validator(mode="after")
    def _body_size(self) -> PutConfig:
        if self.body is not None:
            check_size(self.body)
        return self


class CheckRequest(BaseModel):
    """Body of POST .../criteria/check: one trace to score against the config's criteria."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: Trace


def init_app(app: Flask) -> None:
    """Give the app a config store on its Redis connection."""
    app.extensions["rolegate_configs"] = ConfigStore(services_of(app).redis)


def config_store() -> ConfigStore:
    """The app's config store."""
    store: ConfigStore = current_app.extensions["rolegate_configs"]
    return store


def diff_json(changes: CriteriaDiff) -> dict[str, Any]:
    """A criteria diff as JSON, with a one-line summary."""
    body = changes.model_dump(mode="json")
    body["summary"] = (f"{len(changes.added)} added, {len(changes.removed)} removed, "
                       f"{len(changes.changed)} changed, {len(changes.reworded)} reworded")
    return body


def _record_json(record: ConfigRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"body"} if record.body is None else set())


def snapshot_json(generation: int, records: Mapping[str, VersionedBinding],
                  view: str = "client", bodies: str = "inline") -> dict[str, Any]:
    """The body of `GET /v1/bindings` (and of a watch): the bindings, and their configs' bodies.

    `view` "client" gives each record as resolving reads it (`router.api.client_view`),
    "full" as stored. `bodies` "inline" holds each role's current and candidate config
    body, where one is registered, so a client resolves to the body with no extra call;
    "versions" gives `body_versions` instead, {config: the config version whose body it
    is}, for a client that fetches each body the first time it needs it (an SDK holding
    a thousand roles need not hold a thousand bodies).
    """
    wanted = [config for record in records.values()
              for config in (record.binding.current, record.binding.candidate) if config]
    dump = client_record if view == "client" else _full_record
    out: dict[str, Any] = {"generation": generation,
                           "roles": {role: dump(rec) for role, rec in records.items()}}
    if bodies == "versions":
        out["body_versions"] = config_store().body_versions(wanted)
    else:
        out["bodies"] = config_store().bodies(wanted)
    return out


def _full_record(record: VersionedBinding) -> dict[str, Any]:
    full: dict[str, Any] = record.model_dump(mode="json")
    return full


@bp.put("/v1/configs/<config>")
@require()
def put_config(config: str) -> ResponseReturnValue:
    """Register a config's spec, body or description, keeping what the request leaves out."""
    body = parse(PutConfig, json_body(allow_empty=False))
    sent = body.model_fields_set
    record, previous = config_store().put(
        config, body.spec, actor=actor(),
        description=body.description if body.description is not None else KEEP,
        body=body.body if "body" in sent else KEEP, expected_version=if_match("config"))
    out = _record_json(record)
    out["diff"] = diff_json(diff(previous.criteria if previous else (), record.criteria))
    response = jsonify(out)
    response.headers["ETag"] = f'"{record.version}"'
    return response, 200 if previous else 201


@bp.get("/v1/configs")
@require("caller", "reviewer", "gatekeeper")
def list_configs() -> ResponseReturnValue:
    """Every config with a registered spec."""
    return jsonify({"configs": config_store().configs()})


@bp.get("/v1/configs/<config>")
@require("caller", "reviewer", "gatekeeper")
def get_config(config: str) -> ResponseReturnValue:
    """A config's spec, criteria and versions."""
    record = config_store().get(config)
    response = jsonify(_record_json(record))
    response.headers["ETag"] = f'"{record.version}"'
    return response


@bp.get("/v1/configs/<config>/versions")
@require("caller", "reviewer", "gatekeeper")
def list_versions(config: str) -> ResponseReturnValue:
    """Every kept version of the config: number, when, by whom, and whether it has a body."""
    records = config_store().versions(config)
    return jsonify({"config": config, "versions": [
        {"version": r.version, "updated_at": r.updated_at, "updated_by": r.updated_by,
         "body": r.body is not None, "criteria": len(r.criteria), "description": r.description}
        for r in records]})


@bp.get("/v1/configs/<config>/versions/<version>")
@require("caller", "reviewer", "gatekeeper")
def get_version(config: str, version: str) -> ResponseReturnValue:
    """The config's record as it was at `version`."""
    record = config_store().version(config, version_param(version))
    response = jsonify(_record_json(record))
    response.headers["ETag"] = f'"{record.version}"'
    return response


@bp.get("/v1/configs/<config>/criteria")
@require("caller", "reviewer", "gatekeeper")
def get_criteria(config: str) -> ResponseReturnValue:
    """The criteria stored for a config."""
    record = config_store().get(config)
    return jsonify({"config": config, "version": record.version,
                    "policy_since": record.policy_since,
                    "criteria": [c.model_dump(mode="json") for c in record.criteria]})


@bp.get("/v1/configs/<a>/criteria/diff/<b>")
@require("caller", "reviewer", "gatekeeper")
def diff_criteria(a: str, b: str) -> ResponseReturnValue:
    """What changes in the criteria going from config `a` to config `b`."""
    store = config_store()
    old, new = store.get(a), store.get(b)
    return jsonify({"from": a, "to": b, **diff_json(diff(old.criteria, new.criteria))})


@bp.post("/v1/configs/<config>/criteria/check")
@require("caller", "gatekeeper")
def check_criteria(config: str) -> ResponseReturnValue:
    """Score one trace against the config's criteria: a verdict (or null) per key."""
    record = config_store().get(config)
    body = parse(CheckRequest, json_body(allow_empty=False))
    verdicts = evaluate(record.criteria, body.trace)
    failed = sorted(k for k, v in verdicts.items() if v is False)
    return jsonify({"config": config, "version": record.version, "verdicts": verdicts,
                    "failed": failed})
