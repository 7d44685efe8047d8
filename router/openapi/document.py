"""GET /openapi.json: an OpenAPI 3.1 description of the router, as it really behaves.

Schemas come from the pydantic models the endpoints validate with, so the spec
cannot drift from the code on a field. The paths are written out below, one
entry per operation, with every status the view can answer. A route with no
entry here still appears, with a generic description, so the spec lists every
endpoint the app serves (the test suite checks that no route is left generic).
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from werkzeug.routing import Rule

from bindings.models import ROLE_NAME_SCHEMA_PATTERN, Binding, HistoryEntry, VersionedBinding
from bindings.offline import OfflineVerdict, StoredOfflineVerdict
from gatekeeper.checks.criteria import CriteriaDiff
from gatekeeper.machine.details import EntryDetails
from gatekeeper.store.configs import ConfigRecord
from gatekeeper.view_model import GateView, RuleView
from rolegate.config_ids import CONFIG_ID_PATTERN, MAX_CONFIG_ID
from router.api.accept_redis import AcceptRequest
from router.api.archive import ArchiveRequest
from router.api.bindings import CanaryRequest, PutRequest, RollbackRequest
from router.api.bindings import _Action as ActionRequest
from router.api.configs import CheckRequest, PutConfig
from router.api.feedback import FeedbackRequest
from router.api.lease import HeartbeatRequest, LeaseRequest, ReleaseRequest
from router.api.restore_snapshot import RestoreRequest
from router.openapi.judges import JUDGE_PATHS
from router.openapi.more import MORE_PATHS
from router.openapi.ofrep import OFREP_PATHS
from router.openapi.operator import ARCHIVED, OPERATOR_PATHS, answers_archived
from router.openapi.paths import ERROR_STATUSES, PATHS, RESOLUTION
from router.server.hosts import EXEMPT_PATHS
from router.server.tokens import SCOPES

bp = Blueprint("openapi", __name__)

REF = "#/components/schemas/{model}"
_EXTENSION_KEY = "rolegate.openapi"
#: Flask's `<converter:name>` becomes `{name}`; the converter decides the schema.
_RULE_ARGUMENT = re.compile(r"<(?:(?P<converter>\w+)(?:\([^)]*\))?:)?(?P<name>\w+)>")
_CONVERTER_SCHEMAS = {"int": {"type": "integer"}, "float": {"type": "number"}}
_SKIPPED_ENDPOINTS = {"static"}

#: (model, mode) pairs whose JSON schemas become components.
MODELS: list[tuple[type[BaseModel], Any]] = [
    (Binding, "validation"),
    (PutRequest, "validation"),
    (RollbackRequest, "validation"),
    (CanaryRequest, "validation"),
    (ActionRequest, "validation"),
    (ArchiveRequest, "validation"),
    (VersionedBinding, "serialization"),
    (HistoryEntry, "serialization"),
    (PutConfig, "validation"),
    (CheckRequest, "validation"),
    (ConfigRecord, "serialization"),
    (CriteriaDiff, "serialization"),
    (FeedbackRequest, "validation"),
    (OfflineVerdict, "validation"),
    (StoredOfflineVerdict, "serialization"),
    (LeaseRequest, "validation"),
    (ReleaseRequest, "validation"),
    (HeartbeatRequest, "validation"),
    (RestoreRequest, "validation"),
    (AcceptRequest, "validation"),
    # The gate view's typed sections (`gatekeeper.view_model`): their enums are the code's.
    (GateView, "serialization"),
    (RuleView, "serialization"),
    # A history entry's details, a gatekeeper's decision (`DecisionDetails`) in them.
    (EntryDetails, "serialization"),
]
#: Components whose `details` is a history entry's, held as a plain dict by a model that
#: cannot name `EntryDetails`: bindings imports no gatekeeper, and the gate view's models
#: are imported by `machine.details`. Their schemas point at the generated one instead.
ENTRY_DETAILS = ("HistoryEntry", "RollbackEntryView")
#: Every described operation: {path: {method: operation}}.
OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {}
for _described in (PATHS, MORE_PATHS, OPERATOR_PATHS, OFREP_PATHS, JUDGE_PATHS):
    for _path, _methods in _described.items():
        OPERATIONS[_path] = {**OPERATIONS.get(_path, {}), **_methods}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}

ERROR_DESCRIPTIONS = {
    400: "Malformed request: not JSON, nested deeper than 64 levels, wrong shape or a bad "
         "parameter; or a Host this router does not serve (ROLEGATE_ALLOWED_HOSTS).",
    401: "No bearer token, or one the server does not know.",
    403: "The token's scope may not call this.",
    404: "No such role, version or record.",
    410: "The role was archived (details: reason, archived_by, archived_at).",
    409: "The version you read is no longer current, or the stage machine refuses the move.",
    413: "The request body is larger than ROLEGATE_MAX_BODY_BYTES.",
    422: "A field broke a model invariant.",
    428: "Replacing an existing binding or config needs If-Match.",
    429: "The token's ingest quota for this second is spent (ROLEGATE_INGEST_QUOTA); "
         "Retry-After says when to try again.",
    503: "Not applied: Redis did not answer, or refused (details.condition OOM, READONLY, "
         "NOREPLICAS, BUSY, ...).",
    504: "Outcome unknown (code outcome_unknown): the write reached Redis but its answer "
         "did not come back, or (details.condition replication_timeout) it is on the primary "
         "but fewer replicas than ROLEGATE_MIN_REPLICAS confirmed it; read the record back, "
         "or retry with the same Idempotency-Key.",
}


#: pydantic's names for a number's bounds, and JSON Schema's.
_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _json_schema_bounds(node: Any) -> Any:
    """Bounds by JSON Schema's names, everywhere in `node`.

    A bound on an optional number whose type carries its own validator (`JsonInt | None`
    with `ge=1`) comes out of pydantic as `{"ge": 1}`, a keyword JSON Schema does not
    know: a client reading the document (schemathesis, a generated SDK) would take 0 as
    valid where the router answers 422.
    """
    if isinstance(node, list):
        return [_json_schema_bounds(item) for item in node]
    if not isinstance(node, dict):
        return node
    numeric = node.get("type") in ("integer", "number")
    return {(_BOUNDS[key] if numeric and key in _BOUNDS else key): _json_schema_bounds(value)
            for key, value in node.items()}


def model_schemas(models: list[tuple[type[BaseModel], Any]] | None = None) -> dict[str, Any]:
    """Component schemas for `models` (default MODELS), refs pointing into components."""
    _, top = models_json_schema(models or MODELS, ref_template=REF)
    schemas: dict[str, Any] = _json_schema_bounds(dict(top.get("$defs", {})))
    for name in ENTRY_DETAILS:
        schemas[name] = typed_details(schemas[name])
    schemas["Error"] = ERROR_SCHEMA
    schemas["ErrorDetail"] = ERROR_SCHEMA["properties"]["error"]
    schemas["Resolution"] = RESOLUTION
    # Some answers are a model's fields plus a few more; models forbid extra keys,
    # so these are copies of the model's schema with the extra properties added.
    summary = {"type": "string"}
    schemas["DiffSummary"] = extended(schemas["CriteriaDiff"], "DiffSummary",
                                      summary=summary)
    schemas["DiffBetween"] = extended(schemas["CriteriaDiff"], "DiffBetween", summary=summary,
                                      **{"from": {"type": "string"}, "to": {"type": "string"}})
    schemas["ArchivedBinding"] = extended(schemas["VersionedBinding"], "ArchivedBinding",
                                          archived=ARCHIVED)
    schemas["ConfigWritten"] = extended(schemas["ConfigRecord"], "ConfigWritten",
                                        diff={"$ref": REF.format(model="DiffSummary")})
    return schemas


def typed_details(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object `schema` whose `details` is the EntryDetails component."""
    plain = schema["properties"]["details"]
    if plain.get("type") != "object":  # the model typed it: the generated schema serves
        raise TypeError(f"{schema.get('title')}.details is no longer a plain object: {plain}")
    typed = {key: plain[key] for key in ("description", "default") if key in plain}
    return {**schema, "properties": {**schema["properties"],
                                     "details": {"$ref": REF.format(model="EntryDetails"),
                                                 **typed}}}


def extended(schema: dict[str, Any], title: str, **extra: dict[str, Any]) -> dict[str, Any]:
    """A copy of an object `schema` with the `extra` properties added and required."""
    return {
        **schema,
        "title": title,
        "properties": {**schema["properties"], **extra},
        "required": [*schema.get("required", []), *extra],
    }


def openapi_path(rule: Rule) -> tuple[str, list[dict[str, Any]]]:
    """The OpenAPI path of a Flask rule and its path parameters."""
    params: list[dict[str, Any]] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        schema: dict[str, Any] = _CONVERTER_SCHEMAS.get(match.group("converter") or "",
                                                         {"type": "string"})
        if name == "role":
            schema = {"type": "string", "pattern": ROLE_NAME_SCHEMA_PATTERN}
        elif name == "version":
            schema = {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"}
        elif name in ("config", "a", "b"):
            schema = {"type": "string", "pattern": CONFIG_ID_PATTERN.pattern,
                      "minLength": 1, "maxLength": MAX_CONFIG_ID}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
        return "{" + name + "}"

    return _RULE_ARGUMENT.sub(replace, rule.rule), params


#: What gunicorn answers itself, before rolegate sees the request (an HTML page).
URI_TOO_LONG = {
    "description": "The request line is longer than gunicorn's limit_request_line (4094 "
                   "bytes; a very long `key`, say): gunicorn answers this itself, as HTML.",
    "content": {"text/html": {"schema": {"type": "string"}}},
}


def _responses(path: str, operation: dict[str, Any]) -> dict[str, Any]:
    responses = dict(operation.get("responses", {}))
    errors = set(operation.get("errors", ()))
    if answers_archived(path):
        errors.add(410)
    if path not in EXEMPT_PATHS:
        errors.add(400)  # a Host this router does not serve (router.server.hosts)
    for status in sorted(errors):
        # An operation that describes a status itself (OFREP's own error shapes) keeps it.
        responses.setdefault(str(status), {"$ref": f"#/components/responses/E{status}"})
    responses["414"] = {"$ref": "#/components/responses/E414"}
    return responses


def _operation(path: str, method: str, params: list[dict[str, Any]],
               scopes: frozenset[str] | None) -> dict[str, Any]:
    """One operation; `scopes` are its view's own (`router.server.auth.require`; None: no
    token), never a second statement of them."""
    described = OPERATIONS.get(path, {}).get(method)
    if described is None:
        return {
            "summary": f"{method.upper()} {path} (not yet described)",
            "parameters": params,
            "responses": {"default": {"description": "Any answer; JSON errors use Error.",
                                      "content": {"application/json": {"schema": {}}}}},
            "x-rolegate-generic": True,
        }
    operation = {k: v for k, v in described.items() if k != "errors"}
    operation["parameters"] = params + list(described.get("parameters", []))
    operation["responses"] = _responses(path, described)
    if scopes is None:
        operation["security"] = []
    else:
        operation["security"] = [{"bearer": []}]
        others = [scope for scope in SCOPES if scope in scopes and scope != "operator"]
        needs = (" Needs a token of scope " + ", ".join(others) + " (operator may always)."
                 if others else " Needs an operator token.")
        operation["description"] = (operation.get("description", "") + needs).strip()
    return operation


def build_spec(app: Flask) -> dict[str, Any]:
    """The whole OpenAPI 3.1 document for `app`'s routes."""
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint in _SKIPPED_ENDPOINTS or rule.endpoint.endswith(".static"):
            continue
        path, params = openapi_path(rule)
        scopes = getattr(app.view_functions[rule.endpoint], "required_scopes", None)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = _operation(path, method.lower(), params,
                                                                    scopes)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "rolegate",
            "version": "1",
            "description": "Staged-rollout router and config-binding service for AI agents.",
        },
        "paths": paths,
        "components": {
            "schemas": model_schemas(),
            "responses": {
                f"E{status}": {
                    "description": ERROR_DESCRIPTIONS.get(status, "An error."),
                    "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}},
                }
                for status in ERROR_STATUSES
            } | {"E414": URI_TOO_LONG},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


@bp.get("/openapi.json")
def openapi_json() -> ResponseReturnValue:
    """This router's OpenAPI 3.1 document."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    spec = app.extensions.get(_EXTENSION_KEY)
    if spec is None:
        # Routes are fixed once the app serves, so one build per app is enough.
        spec = app.extensions[_EXTENSION_KEY] = build_spec(app)
    return jsonify(spec)
