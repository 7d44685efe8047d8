"""OpenAPI operations of the online judges' routes (router.api.judges).

Merged per path into `router.openapi.document.OPERATIONS`.
"""

from __future__ import annotations

from typing import Any

from rolegate.trace import TraceArm
from router.openapi.paths import AUTH, enum_of, json_body, json_response

_OBJECT: dict[str, Any] = {"type": "object"}
_ARM = enum_of(TraceArm)
_ITEM = {"type": "object", "required": ["claim", "run_id", "arm", "config", "epoch"],
         "properties": {"claim": {"type": "string"},
                        "run_id": {"type": "string"}, "reporter": {"type": ["string", "null"]},
                        "arm": _ARM, "config": {"type": "string"}, "epoch": {"type": "string"},
                        "input_text": {"type": "string"}, "output_text": {"type": "string"},
                        "trajectory_text": {"type": "string"},
                        "criteria": {"type": "array", "items": _OBJECT}}}
_RESULT = {"type": "object", "additionalProperties": False,
           "required": ["claim", "run_id", "arm", "config", "epoch"],
           "properties": {
               "claim": {"type": "string", "minLength": 1, "maxLength": 100},
               "run_id": {"type": "string", "minLength": 1, "maxLength": 200},
               "reporter": {"type": ["string", "null"], "maxLength": 200},
               "arm": _ARM,
               "config": {"type": "string", "minLength": 1, "maxLength": 200},
               "epoch": {"type": "string", "minLength": 1, "maxLength": 40},
               "verdicts": {"type": ["object", "null"], "additionalProperties": {
                   "type": "object", "required": ["pass"], "additionalProperties": False,
                   "properties": {"pass": {"type": "boolean"},
                                  "reason": {"type": "string", "maxLength": 2000}}}},
               "error": {"type": ["string", "null"], "minLength": 1, "maxLength": 2000},
               "repeat": {"type": ["object", "null"],
                          "additionalProperties": {"type": "boolean"}},
               "tokens": {"type": "integer", "minimum": 0, "maximum": 10_000_000}}}

JUDGE_PATHS: dict[str, dict[str, dict[str, Any]]] = {
    "/v1/roles/{role}/judge/claim": {"post": {
        "summary": "Take sampled runs to judge (within the day's budget), with what to judge.",
        "description": "For the judging process (the gatekeeper's). Each item carries the run's "
                       "input and output text, bounded, its config's judge criteria and its "
                       "claim id; each taken run counts as one of the day's calls and is held "
                       "for lease_s seconds: unanswered by then, it goes back to the queue and "
                       "its call is refunded. 404 when the role names no judge.",
        "requestBody": json_body({"type": "object", "additionalProperties": False,
                                  "properties": {"max": {"type": "integer", "minimum": 1,
                                                         "maximum": 64},
                                                 "lease_s": {"type": ["number", "null"],
                                                             "exclusiveMinimum": 0,
                                                             "maximum": 3600}}}),
        "responses": {"200": json_response("The runs to judge, the judge's settings (never a "
                                           "credential) and the day's counters.", {
            "type": "object", "required": ["role", "judge", "items", "day"],
            "properties": {"role": {"type": "string"}, "judge": _OBJECT,
                           "items": {"type": "array", "items": _ITEM}, "day": _OBJECT}})},
        "errors": (400, *AUTH, 404, 413, 422, 503),
    }},
    "/v1/roles/{role}/judge/verdicts": {"post": {
        "summary": "Report judged runs' verdicts (stored with the trace, counted) or errors.",
        "description": "Each result answers the claim it names, for the run, reporter, arm, "
                       "config and epoch it was handed out with. Otherwise nothing is "
                       "recorded: 409 (404 when only stored runs are missing), "
                       "details.refused naming each refused result and why (not_claimed, "
                       "claim_mismatch, run_not_found).",
        "requestBody": json_body({"type": "object", "required": ["results"],
                                  "additionalProperties": False,
                                  "properties": {"results": {"type": "array", "maxItems": 64,
                                                             "items": _RESULT}}},
                                 required=True),
        "responses": {"200": json_response("How many runs were judged and how many failed.", {
            "type": "object", "required": ["judged", "errors"],
            "properties": {"judged": {"type": "integer"}, "errors": {"type": "integer"}}})},
        "errors": (400, *AUTH, 404, 409, 413, 422, 503),
    }},
}
