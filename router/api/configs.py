"""The config registry API: a config's spec, the criteria generated from it, and their diff.

    PUT  /v1/configs/<config>                       {"spec": {...}, "description": "..."}
    GET  /v1/configs                                every registered config id
    GET  /v1/configs/<config>                       the record: spec, criteria, versions
    GET  /v1/configs/<config>/criteria              the stored criteria
    GET  /v1/configs/<a>/criteria/diff/<b>          added, removed, changed, reworded
    POST /v1/configs/<config>/criteria/check        {"trace": {...}} -> verdict per key
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.criteria import CriteriaDiff, diff, evaluate
from gatekeeper.spec import Spec
from gatekeeper.store.configs import ConfigRecord, ConfigStore
from rolegate.trace import Trace
from router.api.bodies import json_body, parse
from router.api.params import if_match
from router.server.auth import actor, require

bp = Blueprint("configs", __name__)


class PutConfig(BaseModel):
    """Body of PUT /v1/configs/<config>."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: Spec
    description: str = Field("", max_length=2000)


class CheckRequest(BaseModel):
    """Body of POST .../criteria/check: one trace to score against the config's criteria."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: Trace


def init_app(app: Flask) -> None:
    """Give the app a config store on its Redis connection."""
    app.extensions["rolegate_configs"] = ConfigStore(app.extensions["rolegate"].redis)


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
    return record.model_dump(mode="json")


@bp.put("/v1/configs/<config>")
@require()
def put_config(config: str) -> ResponseReturnValue:
    """Register or replace a config's spec; criteria are generated and stored with it."""
    body = parse(PutConfig, json_body(allow_empty=False))
    record, previous = config_store().put(config, body.spec, actor=actor(),
                                          description=body.description,
                                          expected_version=if_match("config"))
    out = _record_json(record)
    out["diff"] = diff_json(diff(previous.criteria if previous else (), record.criteria))
    response = jsonify(out)
    response.headers["ETag"] = f'"{record.version}"'
    return response, 200 if previous else 201


@bp.get("/v1/configs")
@require("caller", "gatekeeper")
def list_configs() -> ResponseReturnValue:
    """Every config with a registered spec."""
    return jsonify({"configs": config_store().configs()})


@bp.get("/v1/configs/<config>")
@require("caller", "gatekeeper")
def get_config(config: str) -> ResponseReturnValue:
    """A config's spec, criteria and versions."""
    record = config_store().get(config)
    response = jsonify(_record_json(record))
    response.headers["ETag"] = f'"{record.version}"'
    return response


@bp.get("/v1/configs/<config>/criteria")
@require("caller", "gatekeeper")
def get_criteria(config: str) -> ResponseReturnValue:
    """The criteria stored for a config."""
    record = config_store().get(config)
    return jsonify({"config": config, "version": record.version,
                    "policy_since": record.policy_since,
                    "criteria": [c.model_dump(mode="json") for c in record.criteria]})


@bp.get("/v1/configs/<a>/criteria/diff/<b>")
@require("caller", "gatekeeper")
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
