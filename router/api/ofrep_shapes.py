"""OFREP's shapes: an evaluation context read as a job, a resolution written as an evaluation.

OpenFeature's remote evaluation protocol (open-feature/protocol,
`service/openapi.yaml`) maps onto rolegate one to one: the flag key is the
role, `context.targetingKey` the job key, the context's other properties the
job's attributes for the role's targeting rules, and the value the config id.
This module holds that mapping and nothing of Flask's request or Redis, so the
views in `router.api.ofrep` stay thin.

OFREP's errors carry an `errorCode` from OpenFeature's list; `OfrepError`
carries it with the HTTP status the protocol pairs it with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from bindings.models import ATTRIBUTE_NAME_PATTERN
from rolegate.routing import Resolution
from rolegate.trace import MAX_ATTRIBUTES

#: The same limits as `GET /v1/resolve` (router.api.resolve).
MAX_KEY_LENGTH = 500
MAX_ATTRIBUTE_VALUE = 200
#: OFREP's context names the job key `targetingKey`; it is not an attribute.
TARGETING_KEY = "targetingKey"


class OfrepError(Exception):
    """An OFREP error answer: HTTP status, OpenFeature error code, details for a human."""

    def __init__(self, status: int, code: str, details: str) -> None:
        super().__init__(details)
        self.status = status
        self.code = code
        self.details = details


def parse_error(details: str) -> OfrepError:
    """The body is not JSON, or not the object OFREP sends."""
    return OfrepError(400, "PARSE_ERROR", details)


def invalid_context(details: str) -> OfrepError:
    """The context is there but rolegate cannot read it as a job."""
    return OfrepError(400, "INVALID_CONTEXT", details)


def read_context(body: Any) -> tuple[str, dict[str, str]]:
    """(job key, attributes) from an OFREP request body; OfrepError naming what is wrong.

    Attribute values that are numbers or booleans become their JSON text (a rule
    matches the text `"true"` or `"3"`); null is an absent attribute. Nested
    objects and lists cannot be matched by a rule and are refused, as is a name
    a rule could not name, a text over 200 characters, or more than 10
    properties besides targetingKey (`OPENAPI_CONTEXT` says the same).
    """
    if not isinstance(body, dict):
        raise parse_error(f"the request body must be a JSON object, got {_kind(body)}")
    context = body.get("context")
    if context is None:
        raise OfrepError(400, "TARGETING_KEY_MISSING",
                         "the request has no context; send {\"context\": {\"targetingKey\": "
                         "<job key>, ...}}")
    if not isinstance(context, dict):
        raise invalid_context(f"context must be an object, got {_kind(context)}")
    key = context.get(TARGETING_KEY)
    if key is None or key == "":
        raise OfrepError(400, "TARGETING_KEY_MISSING",
                         "context.targetingKey is missing: it is the job key rolegate buckets")
    if not isinstance(key, str):
        raise invalid_context(f"context.targetingKey must be a string, got {_kind(key)}")
    if len(key) > MAX_KEY_LENGTH:
        raise invalid_context(f"context.targetingKey: at most {MAX_KEY_LENGTH} characters")
    if len(context) > MAX_ATTRIBUTES + 1:
        raise invalid_context(f"context: at most {MAX_ATTRIBUTES} properties besides "
                              "targetingKey")
    attributes: dict[str, str] = {}
    for name, value in context.items():
        if name == TARGETING_KEY or value is None:
            continue
        if not ATTRIBUTE_NAME_PATTERN.match(name):
            raise invalid_context(f"context.{name}: an attribute name is 1-64 letters, digits, "
                                  "'_', '.', '-'")
        if isinstance(value, str):
            if len(value) > MAX_ATTRIBUTE_VALUE:
                raise invalid_context(f"context.{name}: at most {MAX_ATTRIBUTE_VALUE} "
                                      "characters")
            attributes[name] = value
        elif isinstance(value, bool | int | float):
            attributes[name] = json.dumps(value)
        else:
            raise invalid_context(f"context.{name}: targeting reads strings, numbers and "
                                  f"booleans, got {_kind(value)}")
    return key, attributes


def reason(resolution: Resolution) -> str:
    """OpenFeature's reason: a rule picked the arm, the bucket split it, or nothing varied."""
    if "rule" in resolution:
        return "TARGETING_MATCH"
    if resolution["stage"] == "canary":
        return "SPLIT"
    return "STATIC"


def evaluation(resolution: Resolution,
               bodies: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An OFREP evaluationSuccess for `resolution`: value = config id, variant = arm.

    OFREP metadata holds only strings, numbers and booleans, so the rule's
    attributes come as `attr.<name>` and a config body (when `bodies` holds it)
    as its JSON text under `body` (`shadow_body` for the shadow's).
    """
    metadata: dict[str, Any] = {
        "arm": resolution["arm"],
        "stage": resolution["stage"],
        "share": resolution["share"],
        "version": resolution["version"],
        "stale": resolution["stale"],
    }
    if resolution["shadow"] is not None:
        metadata["shadow"] = resolution["shadow"]
    if "rule" in resolution:
        metadata["rule"] = resolution["rule"]
        for name, value in resolution.get("attributes", {}).items():
            metadata[f"attr.{name}"] = value
    if bodies is not None:
        for field, config in (("body", resolution["config"]),
                              ("shadow_body", resolution["shadow"])):
            if config is not None and config in bodies:
                metadata[field] = json.dumps(bodies[config], separators=(",", ":"),
                                             sort_keys=True)
    return {"key": resolution["role"], "value": resolution["config"],
            "reason": reason(resolution), "variant": resolution["arm"], "metadata": metadata}


def failure(key: str | None, error: OfrepError) -> dict[str, Any]:
    """An OFREP failure body: evaluationFailure / flagNotFound, or bulkEvaluationFailure."""
    answer: dict[str, Any] = {"errorCode": error.code, "errorDetails": error.details}
    if key is not None:
        answer = {"key": key, **answer}
    return answer


def etag(body: bytes) -> str:
    """A strong ETag for a bulk answer: the same evaluations give the same tag."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an If-None-Match header names `tag` (or `*`), weak tags compared weakly."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == tag:
            return True
    return False


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
