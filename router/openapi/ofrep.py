"""OpenAPI operations of OFREP (`router.api.ofrep`), in the protocol's own shapes.

The schemas follow open-feature/protocol's `service/openapi.yaml` (evaluationRequest,
evaluationSuccess, evaluationFailure, flagNotFound, bulkEvaluationSuccess,
bulkEvaluationFailure; the protocol dropped its configuration endpoint in 2025),
narrowed to what rolegate answers:
a string value (the config id), `variant` the arm, flat metadata.
"""

from __future__ import annotations

from typing import Any

from router.api.ofrep import INCLUDE_HEADER
from router.api.ofrep_shapes import MAX_BODY_BYTES, MAX_KEY_LENGTH
from router.openapi.paths import json_body, json_response, ref

CONTEXT = {
    "type": "object",
    "description": "Any JSON object, as the SDK merged it. targetingKey is the job key; "
                   "the properties a role's targeting rules read are the job's attributes "
                   "(a string as it is, a number or boolean as its JSON text, null, a list "
                   "or an object as absent); every other property is ignored. The request "
                   f"body is at most {MAX_BODY_BYTES} bytes.",
    "required": ["targetingKey"],
    "properties": {"targetingKey": {"type": ["string", "number"], "minLength": 1,
                                    "maxLength": MAX_KEY_LENGTH}},
    "additionalProperties": True,
}
REQUEST = {"type": "object", "required": ["context"], "properties": {"context": CONTEXT}}
METADATA = {
    "type": "object",
    "description": "arm, stage, share, version, stale; shadow when one runs; rule when a "
                   "targeting rule picked the arm; attr.<name>, the attributes that decided "
                   "(the rule's, the unit's); bucketing.version, bucketing.bucket_by "
                   "(targetingKey for the key), bucketing.salted (bucketing.unit_missing); "
                   "body (and shadow_body), the config body as JSON text, when asked; "
                   "run_id, the run this evaluation starts (report its trace under it).",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
}
SUCCESS = {
    "type": "object",
    "required": ["key", "value", "reason", "variant", "metadata"],
    "properties": {
        "key": {"type": "string", "description": "The role."},
        "value": {"type": "string", "description": "The config id the job runs."},
        "reason": {"enum": ["STATIC", "TARGETING_MATCH", "SPLIT", "DEFAULT"]},
        "variant": {"enum": ["current", "candidate"]},
        "metadata": METADATA,
    },
}
_CODES = ["PARSE_ERROR", "TARGETING_KEY_MISSING", "INVALID_CONTEXT", "GENERAL"]
FAILURE: dict[str, Any] = {"type": "object", "required": ["key", "errorCode", "errorDetails"],
           "properties": {"key": {"type": "string"}, "errorCode": {"enum": _CODES},
                          "errorDetails": {"type": "string"}}}
NOT_FOUND = {**FAILURE, "properties": {**FAILURE["properties"],
                                       "errorCode": {"enum": ["FLAG_NOT_FOUND"]}}}
BULK_FAILURE: dict[str, Any] = {"type": "object", "required": ["errorCode", "errorDetails"],
                "properties": {"errorCode": {"enum": _CODES},
                               "errorDetails": {"type": "string"}}}
BULK = {"type": "object", "required": ["flags"],
        "properties": {"flags": {"type": "array", "items": SUCCESS}}}
DETAILS = {"type": "object", "required": ["errorDetails"],
           "properties": {"errorDetails": {"type": "string"}}}
INCLUDE = [{"name": "include", "in": "query", "required": False,
            "schema": {"enum": ["body"]}},
           {"name": INCLUDE_HEADER, "in": "header", "required": False,
            "description": "body: put the config body in the metadata (what providers can "
                           "send; they set headers, not query parameters).",
            "schema": {"enum": ["body"]}}]
AUTH_ANSWERS = {"401": json_response("No bearer token, or one the server does not know.",
                                     DETAILS),
                "403": json_response("The token's scope or role list does not allow this.",
                                     DETAILS)}


def _bad(shape: dict[str, Any]) -> dict[str, Any]:
    return json_response("PARSE_ERROR, TARGETING_KEY_MISSING or INVALID_CONTEXT (or, in "
                         "rolegate's Error shape, a Host this router does not serve).",
                         {"anyOf": [shape, ref("Error")]})


OFREP_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/ofrep/v1/evaluate/flags/{role}": {"post": {
        "summary": "OFREP single evaluation: which config serves the role (the flag key) "
                   "for the context's targetingKey (the job key).",
        "parameters": INCLUDE,
        "requestBody": json_body(REQUEST, True),
        "responses": {
            "200": json_response("The evaluation: value the config id, variant the arm.",
                                 SUCCESS),
            "400": _bad(FAILURE), **AUTH_ANSWERS,
            "404": json_response("No such role, or it was archived.", NOT_FOUND),
            "500": json_response("GENERAL: the table is not loaded and Redis does not answer.",
                                 FAILURE),
        },
        "errors": (413,),
    }},
    "/ofrep/v1/evaluate/flags": {"post": {
        "summary": "OFREP bulk evaluation: every role the token may act on, with an ETag.",
        "parameters": [*INCLUDE, {"name": "If-None-Match", "in": "header", "required": False,
                                  "schema": {"type": "string"}}],
        "requestBody": json_body(REQUEST, True),
        "responses": {
            "200": json_response("Every role's evaluation.", BULK,
                                 {"ETag": {"schema": {"type": "string"}}}),
            "304": {"description": "If-None-Match names this answer's ETag: nothing moved."},
            "400": _bad(BULK_FAILURE), **AUTH_ANSWERS,
            "500": json_response("GENERAL: the table is not loaded and Redis does not answer.",
                                 BULK_FAILURE),
        },
        "errors": (413,),
    }},
}
