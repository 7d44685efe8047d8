"""The router's operations, as OpenAPI 3.1 data: one entry per (path, method).

Each operation lists the statuses its view really answers. `errors` names the
error statuses (rendered as the shared Error body). Who may call it is not said
here: `router.openapi.document` reads each view's own scopes (docs/scopes.md,
`router.openapi.scopes`). Schemas refer to the components that
`router.openapi.document` generates from the pydantic models.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, get_args

from bindings.models import Stage
from rolegate.routing import Arm
from rolegate.run_ids import MINTED

#: Every error status some operation answers; each becomes a shared response.
ERROR_STATUSES = (400, 401, 403, 404, 409, 410, 413, 422, 428, 429, 503, 504)
AUTH = (401, 403)


def enum_of(values: Any) -> dict[str, list[str]]:
    """An enum schema read from the code that makes the values: a tuple of constants, an
    Enum class (its values) or a Literal type (its arguments). Never a list written here
    by hand: a value added in the code is in the schema, and the live-view test
    (tests/test_gate_view_openapi.py) fails on one that is not."""
    if isinstance(values, type) and issubclass(values, enum.Enum):
        return {"enum": [member.value for member in values]}
    found: Iterable[str] = get_args(values) or values
    return {"enum": list(found)}


def ref(name: str) -> dict[str, str]:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(description: str, schema: dict[str, Any],
                  headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """A response with a JSON body of `schema`."""
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def json_body(schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    """A JSON request body; an empty body counts as {} where not required."""
    return {"required": required, "content": {"application/json": {"schema": schema}}}


ETAG = {"ETag": {"description": "The binding's version, quoted.",
                 "schema": {"type": "string"}}}
IF_MATCH = {"name": "If-Match", "in": "header", "required": False,
            "description": "The binding version the writer read (compare-and-set).",
            "schema": {"type": "string", "pattern": "^(W/)?\"?[0-9]{1,15}\"?$"}}
IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                   "description": "Makes a retry safe: the same key and request answer the "
                                  "record the first write produced (Idempotent-Replayed: true) "
                                  "instead of writing again; another request with it is a 422.",
                   "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"}}
BINDING = json_response("The binding as stored, with its version.", ref("VersionedBinding"),
                        ETAG)
#: One role in the client view (?view=client, the default): what resolving reads
#: (router/api/client_view.py), never the gate policy.
CLIENT_RECORD = {
    "type": "object",
    "required": ["role", "version", "binding"],
    "properties": {
        "role": {"type": "string"},
        "version": {"type": "integer", "minimum": 1},
        "binding": {
            "type": "object",
            "required": ["current", "stage", "share"],
            "properties": {
                "current": {"type": "string"},
                "candidate": {"type": ["string", "null"]},
                "stage": {"type": "string"},
                "share": {"type": "number"},
                "holdback": {"type": "number"},
                "stage_since": {"type": ["number", "null"]},
                "rules": {"type": "array", "items": {"type": "object"}},
                "gate": {"type": "object", "description": "Only the tool rules: "
                         "invariants.forbidden_tools and invariants.allowed_tools, when set."},
            },
        },
    },
}
VIEW = {"name": "view", "in": "query", "required": False,
        "description": "client (the default): each role as resolving reads it, no gate "
                       "policy; full: every field, as GET /v1/bindings/{role} answers.",
        "schema": {"enum": ["client", "full"]}}
BODIES = {"name": "bodies", "in": "query", "required": False,
          "description": "inline (the default): every body in `bodies`; versions: "
                         "`body_versions` instead, each body named by its config version, "
                         "to fetch when first needed (GET /v1/configs/{config}/versions/{n}).",
          "schema": {"enum": ["inline", "versions"]}}
SNAPSHOT = {
    "type": "object",
    "required": ["generation", "roles"],
    "properties": {
        "generation": {"type": "integer"},
        "roles": {"type": "object", "additionalProperties": {
            "anyOf": [CLIENT_RECORD, ref("VersionedBinding")]}},
        "bodies": {"type": "object", "additionalProperties": {"type": "object"},
                   "description": "Config bodies by config id: each role's current and "
                                  "candidate that have one."},
        "body_versions": {"type": "object", "additionalProperties": {"type": "integer"},
                          "description": "With ?bodies=versions, instead of bodies: the "
                                         "config version whose body it is, by config id."},
        "stale": {"type": "boolean",
                  "description": "Present (true) while Redis lost some role this router "
                                 "serves from its kept table (/healthz: redis_data_lost)."},
        "lost": {"type": "object", "additionalProperties": {"type": "string"},
                 "description": "With stale: each role Redis lost, and what Redis shows "
                                "of it instead."},
    },
}
HEALTH = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"enum": ["ok", "failing"]},
        "checks": {"type": "object"},
    },
}
HISTORY = {
    "type": "object",
    "required": ["role", "entries"],
    "properties": {"role": {"type": "string"},
                   "entries": {"type": "array", "items": ref("HistoryEntry")}},
}
#: `rolegate.routing.Resolution` is a TypedDict (no pydantic schema on 3.11); kept in step
#: with it by the schemathesis test, which validates real answers against this.
RESOLUTION = {
    "type": "object",
    "required": ["role", "config", "arm", "stage", "share", "shadow", "version", "key", "stale",
                 "bucketing"],
    "additionalProperties": False,
    "properties": {
        "role": {"type": "string"},
        "config": {"type": "string"},
        "arm": enum_of(Arm),
        "stage": enum_of(Stage),
        "share": {"type": "number", "minimum": 0, "maximum": 1},
        "shadow": {"type": ["string", "null"]},
        "version": {"type": "integer", "minimum": 1},
        "key": {"type": "string"},
        "stale": {"type": "boolean"},
        "body": {"type": ["object", "null"], "description": "With ?include=body."},
        "shadow_body": {"type": ["object", "null"],
                        "description": "With ?include=body, in shadow."},
        "rule": {"type": "string"},
        "attributes": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "The job attributes that decided: the rule's, and the "
                                      "unit's when the role buckets by an attribute."},
        "holdback": {"type": "number", "minimum": 0, "maximum": 1,
                     "description": "In full: the share of bucketed units kept on current."},
        "run_id": {"type": "string", "pattern": "^" + MINTED.pattern + "$",
                   "description": "The run this assignment starts: report its trace under "
                                  "this run_id and the report is matched to the assignment "
                                  "(a run is missing only when its own id never reports)."},
        "bucketing": {
            "type": "object", "description": "How the job was bucketed (docs/bucketing.md).",
            "required": ["version", "bucket_by", "salted"], "additionalProperties": False,
            "properties": {"version": {"type": "integer", "minimum": 1},
                           "bucket_by": {"type": ["string", "null"],
                                         "description": "The unit's attribute; null: the key."},
                           "salted": {"type": "boolean"},
                           "unit_missing": {"type": "boolean", "description": (
                               "The job had no value for bucket_by: served current.")}}},
    },
}
HTML = {"description": "An HTML page.", "content": {"text/html": {"schema": {"type": "string"}}}}
WRITE_ERRORS = (400, *AUTH, 404, 409, 413, 422, 503, 504)


def _action(summary: str, body: str) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": [IF_MATCH, IDEMPOTENCY_KEY],
        "requestBody": json_body(ref(body), required=True),
        "responses": {"200": BINDING},
        "errors": WRITE_ERRORS,
    }


PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/healthz": {"get": {
        "summary": "Up or down; with a token, each check and the binding copy's state.",
        "responses": {"200": json_response("Every dependency answers.", HEALTH),
                      "503": json_response("Redis does not answer.", HEALTH)},
    }},
    "/livez": {"get": {
        "summary": "The worker answers HTTP (liveness and startup probes).",
        "responses": {"200": json_response("Alive.", {
            "type": "object", "required": ["status"],
            "properties": {"status": {"const": "alive"}}})},
    }},
    "/readyz": {"get": {
        "summary": "Whether this worker can answer resolves (readiness probe): a table, "
                   "fresh or kept.",
        "responses": {
            "200": json_response("It has a binding table (stale: kept while Redis is "
                                 "down or lost data).", {
                                     "type": "object", "required": ["status", "stale"],
                                     "properties": {"status": {"const": "ready"},
                                                    "stale": {"type": "boolean"}}}),
            "503": json_response("No table yet.", {
                "type": "object", "required": ["status", "reason"],
                "properties": {"status": {"const": "not_ready"},
                               "reason": {"type": "string"}}})},
    }},
    "/metrics": {"get": {
        "summary": "Prometheus metrics, summed over every worker.",
        "responses": {"200": {"description": "Prometheus text exposition.",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}},
    }},
    "/openapi.json": {"get": {
        "summary": "This document.",
        "responses": {"200": json_response("The OpenAPI 3.1 document.", {"type": "object"})},
    }},
    "/v1/resolve/{role}": {"get": {
        "summary": "Which config serves the role for a job key (drawn when absent).",
        "description": "attr.<name>=<value> query parameters carry the job's attributes for "
                       "the role's targeting rules; the answer then names the rule that "
                       "picked the arm and the attributes it read.",
        "parameters": [{"name": "key", "in": "query", "required": False,
                        "schema": {"type": "string", "maxLength": 500}},
                       {"name": "include", "in": "query", "required": False,
                        "schema": {"enum": ["body"]}}],
        "responses": {"200": json_response("The arm and config for this key.",
                                           ref("Resolution"))},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/v1/bindings": {"get": {
        "summary": "Every role's binding, with the table's generation as ETag.",
        "parameters": [{"name": "If-None-Match", "in": "header", "required": False,
                        "schema": {"type": "string"}}, VIEW, BODIES],
        "responses": {
            "200": json_response("The binding table.", SNAPSHOT,
                                 {"ETag": {"schema": {"type": "string"}}}),
            "304": {"description": "Unchanged since the generation named in If-None-Match."},
        },
        "errors": (*AUTH, 503),
    }},
    "/v1/bindings/{role}": {
        "get": {
            "summary": "One role's binding and version.",
            "responses": {"200": BINDING},
            "errors": (400, *AUTH, 404, 503),
        },
        "put": {
            "summary": "Create a role, or replace one given If-Match.",
            "description": "The body is a Binding, or {binding, reason}.",
            "parameters": [IF_MATCH, IDEMPOTENCY_KEY],
            "requestBody": json_body({"anyOf": [ref("Binding"), ref("PutRequest")]}, True),
            "responses": {"200": BINDING,
                          "201": json_response("Created.", ref("VersionedBinding"), ETAG)},
            "errors": (*WRITE_ERRORS, 428),
        },
    },
    "/v1/bindings/{role}/rollback": {"post": _action(
        "Zero the canary, or restore to_version as a new version.", "RollbackRequest")},
    "/v1/bindings/{role}/canary": {"post": _action(
        "Set the candidate's share directly (1 means full).", "CanaryRequest")},
    "/v1/bindings/{role}/promote": {"post": _action(
        "Advance the rollout one step.", "_Action")},
    "/v1/bindings/{role}/pause": {"post": _action(
        "Stop the gatekeeper from moving this role.", "_Action")},
    "/v1/bindings/{role}/resume": {"post": _action(
        "Let the gatekeeper move this role again.", "_Action")},
    "/v1/bindings/{role}/approve": {"post": _action(
        "Approve the step the role stands on (one with approval: true), so the gatekeeper "
        "may advance past it once the gate passes.", "_Action")},
    "/v1/bindings/{role}/history": {"get": {
        "summary": "The role's changes, newest first.",
        "parameters": [
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0}},
            {"name": "offset", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0}},
        ],
        "responses": {"200": json_response("History entries.", HISTORY)},
        "errors": (400, *AUTH, 404, 503),
    }},
    "/": {"get": {"summary": "The dashboard: every role at a glance.",
                  "responses": {"200": HTML}}},
    "/v1/bindings/watch": {"get": {
        "summary": "Long-poll: every binding once the generation differs from ?generation=.",
        "parameters": [
            {"name": "generation", "in": "query", "required": False,
             "schema": {"type": "integer"}},
            {"name": "timeout", "in": "query", "required": False,
             "schema": {"type": "number", "minimum": 0, "maximum": 25}},
            VIEW,
            BODIES,
        ],
        "responses": {
            "200": json_response("The binding table, changed.", SNAPSHOT,
                                 {"ETag": {"schema": {"type": "string"}}}),
            "304": {"description": "No change within the timeout."},
        },
        "errors": (400, *AUTH, 503),
    }},
}

PATHS.update({
    "/v1/configs": {"get": {
        "summary": "Every config with a registered spec.",
        "responses": {"200": json_response("Config ids.", {
            "type": "object", "required": ["configs"],
            "properties": {"configs": {"type": "array", "items": {"type": "string"}}}})},
        "errors": (*AUTH, 503),
    }},
    "/v1/configs/{config}": {
        "get": {
            "summary": "A config's spec, criteria and versions.",
            "responses": {"200": json_response("The config record.", ref("ConfigRecord"),
                                               ETAG)},
            "errors": (*AUTH, 404, 422, 503),
        },
        "put": {
            "summary": "Register a config's spec (criteria are generated from it), body or "
                       "description; what the request leaves out is kept.",
            "description": "\"body\": null drops the body. A body change that a live role "
                           "serves may not drop its body or offer a tool the role forbids "
                           "(409 naming the roles).",
            "parameters": [IF_MATCH],
            "requestBody": json_body(ref("PutConfig"), required=True),
            "responses": {
                "200": json_response("Replaced; with the criteria diff.", ref("ConfigWritten"),
                                     ETAG),
                "201": json_response("Registered; with the criteria diff.", ref("ConfigWritten"),
                                     ETAG),
            },
            "errors": (400, *AUTH, 409, 413, 422, 503),
        },
    },
    "/v1/configs/{config}/versions": {"get": {
        "summary": "Every kept version of the config, oldest first.",
        "responses": {"200": json_response("Versions.", {
            "type": "object", "required": ["config", "versions"],
            "properties": {"config": {"type": "string"}, "versions": {
                "type": "array", "items": {
                    "type": "object",
                    "required": ["version", "updated_at", "updated_by", "body", "criteria"],
                    "properties": {"version": {"type": "integer", "minimum": 1},
                                   "updated_at": {"type": "number"},
                                   "updated_by": {"type": "string"},
                                   "body": {"type": "boolean"},
                                   "criteria": {"type": "integer", "minimum": 0},
                                   "description": {"type": "string"}}}}}})},
        "errors": (*AUTH, 404, 422, 503),
    }},
    "/v1/configs/{config}/versions/{version}": {"get": {
        "summary": "The config's record as it was at a version.",
        "responses": {"200": json_response("The config record at that version.",
                                           ref("ConfigRecord"), ETAG)},
        "errors": (400, *AUTH, 404, 422, 503),
    }},
    "/v1/configs/{config}/criteria": {"get": {
        "summary": "The criteria stored for a config.",
        "responses": {"200": json_response("Criteria.", {
            "type": "object", "required": ["config", "version", "criteria"],
            "properties": {"config": {"type": "string"}, "version": {"type": "integer"},
                           "policy_since": {"type": "number"},
                           "criteria": {"type": "array", "items": ref("Criterion")}}})},
        "errors": (*AUTH, 404, 422, 503),
    }},
    "/v1/configs/{a}/criteria/diff/{b}": {"get": {
        "summary": "What changes in the criteria going from config a to config b.",
        "responses": {"200": json_response("The diff.", ref("DiffBetween"))},
        "errors": (*AUTH, 404, 422, 503),
    }},
    "/v1/configs/{config}/criteria/check": {"post": {
        "summary": "Score one trace against the config's criteria: a verdict per key.",
        "requestBody": json_body(ref("CheckRequest"), required=True),
        "responses": {"200": json_response("Verdicts.", {
            "type": "object", "required": ["config", "version", "verdicts", "failed"],
            "properties": {"verdicts": {"type": "object",
                                        "additionalProperties": {"type": ["boolean", "null"]}},
                           "failed": {"type": "array", "items": {"type": "string"}}}})},
        "errors": (400, *AUTH, 404, 413, 422, 503),
    }},
})
