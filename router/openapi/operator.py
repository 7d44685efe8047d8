"""OpenAPI operations of the operator's day: archiving and restoring a role.

Merged per path into `router.openapi.document.OPERATIONS` (DELETE sits beside GET and PUT
on /v1/bindings/{role}, described in `router.openapi.paths`).
"""

from __future__ import annotations

from typing import Any

from router.openapi.paths import AUTH, BINDING, IF_MATCH, json_body, json_response, ref

#: Paths whose role, once archived, answers 410 (reads of its history still work).
ARCHIVED_PREFIXES = ("/v1/resolve/{role}", "/v1/bindings/{role}", "/v1/roles/{role}")
ARCHIVED_EXEMPT = frozenset({"/v1/bindings/{role}/history"})

ARCHIVED = {
    "type": "object",
    "required": ["reason", "actor", "time", "version"],
    "properties": {"reason": {"type": "string"}, "actor": {"type": "string"},
                   "time": {"type": "number"}, "version": {"type": "integer"}},
}
REASON_QUERY = {"name": "reason", "in": "query", "required": False,
                "description": "Why, when the body is empty (recorded in history).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 2000}}

OPERATOR_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/bindings/{role}": {"delete": {
        "summary": "Archive the role: it leaves the table, resolves answer 410, history stays.",
        "parameters": [IF_MATCH, REASON_QUERY],
        "requestBody": json_body(ref("ArchiveRequest")),
        # VersionedBinding forbids other keys, so an allOf with it could not add
        # `archived`: ArchivedBinding is its copy with the note (router.openapi.document).
        "responses": {"200": json_response(
            "The archived role's last record, and the archive note.", ref("ArchivedBinding"))},
        "errors": (400, *AUTH, 404, 409, 413, 422, 503),
    }},
    "/v1/bindings/{role}/restore": {"post": {
        "summary": "Bring an archived role back with the binding it had, as a new version.",
        "parameters": [IF_MATCH, REASON_QUERY],
        "requestBody": json_body(ref("ArchiveRequest")),
        "responses": {"200": BINDING},
        "errors": (400, *AUTH, 404, 409, 413, 422, 503),
    }},
    "/v1/restore-snapshot": {"post": {
        "summary": "After Redis lost data (/healthz: redis_data_lost), write the lost roles "
                   "back from this router's last good table, one version above the kept one "
                   "(archived instead with discard), each with a history entry.",
        "requestBody": json_body(ref("RestoreRequest")),
        "responses": {"200": json_response("What was written back, role by role.", {
            "type": "object",
            "required": ["restored", "discarded", "skipped", "lost", "still_lost"],
            "properties": {
                "restored": {"type": "object", "additionalProperties": {"type": "integer"}},
                "discarded": {"type": "object", "additionalProperties": {"type": "integer"}},
                "skipped": {"type": "object", "additionalProperties": {"type": "string"}},
                "lost": {"type": "object", "additionalProperties": {"type": "string"}},
                "still_lost": {"type": "array", "items": {"type": "string"}}}})},
        "errors": (400, *AUTH, 409, 413, 422, 503, 504),
    }},
    "/v1/accept-redis": {"post": {
        "summary": "After Redis was restored from a backup on purpose, make every router "
                   "serve Redis's table: each role the routers hold above Redis gets Redis's "
                   "record (archived if it has none) one version above the held one, with "
                   "an accept_redis history entry.",
        "requestBody": json_body(ref("AcceptRequest")),
        "responses": {"200": json_response("What was written, role by role.", {
            "type": "object",
            "required": ["accepted", "skipped", "lost", "still_lost"],
            "properties": {
                "accepted": {"type": "object", "additionalProperties": {"type": "integer"}},
                "skipped": {"type": "object", "additionalProperties": {"type": "string"}},
                "lost": {"type": "object", "additionalProperties": {"type": "string"}},
                "still_lost": {"type": "array", "items": {"type": "string"}}}})},
        "errors": (400, *AUTH, 409, 413, 422, 503, 504),
    }},
}


def answers_archived(path: str) -> bool:
    """Whether an archived role makes the operation at `path` answer 410."""
    return path.startswith(ARCHIVED_PREFIXES) and path not in ARCHIVED_EXEMPT
