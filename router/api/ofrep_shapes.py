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
from collections.abc import Iterable, Mapping
from typing import Any

from bindings.models import Rule
from rolegate.routing import Resolution

#: A job key's limit, as `GET /v1/resolve`'s (router.api.resolve).
MAX_KEY_LENGTH = 500
#: The one limit on a context: the request body's size. An SDK's merged context with
#: a browser's user agent and a dozen attributes is about 1 KB.
MAX_BODY_BYTES = 64 * 1024
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


def read_context(body: Any) -> tuple[str, Mapping[str, Any]]:
    """(job key, the context's other properties) from an OFREP request body.

    OFREP's context is any JSON object, merged by the SDK from global, client
    and invocation contexts: every property is accepted as it comes, and
    `job_attributes` later takes only those a role's rules read. The one
    refusal about the context is a targeting key that is missing (or not a
    string or number: nothing to bucket), or one over 500 characters (a job
    key's limit everywhere). The body's size is limited by the view
    (MAX_BODY_BYTES), not its shape.
    """
    if not isinstance(body, dict):
        raise parse_error(f"the request body must be a JSON object, got {_kind(body)}")
    context = body.get("context")
    if not isinstance(context, dict):
        raise OfrepError(400, "TARGETING_KEY_MISSING",
                         "the request has no context object; send {\"context\": "
                         "{\"targetingKey\": <job key>, ...}}"
                         + ("" if context is None else f" (context is {_kind(context)})"))
    key = context.get(TARGETING_KEY)
    if isinstance(key, bool | int | float) and not isinstance(key, bool):
        key = json.dumps(key)  # a number keys the job by its JSON text, as ?key= would
    if not isinstance(key, str) or key == "":
        raise OfrepError(400, "TARGETING_KEY_MISSING",
                         "context.targetingKey is missing: it is the job key rolegate buckets"
                         + ("" if key is None or key == "" else f" (got {_kind(key)})"))
    if len(key) > MAX_KEY_LENGTH:
        raise invalid_context(f"context.targetingKey: at most {MAX_KEY_LENGTH} characters")
    return key, context


def job_attributes(context: Mapping[str, Any], rules: Iterable[Rule],
                   bucket_by: str | None = None) -> dict[str, str] | None:
    """The job's attributes for `rules` and the unit: the context properties they read, as text.

    The documented coercions: a string as it is, a number or boolean as its
    JSON text (a rule matches `"true"` or `"3"`), and null, a list or an object
    as absent (a rule compares one text). Properties no rule reads are ignored,
    whatever their name, shape or length. A role bucketed by an attribute
    (`bucket_by`) reads that one too: its value is the job's unit. None when
    nothing is read.
    """
    attributes: dict[str, str] = {}
    names = [name for rule in rules for name in rule.when]
    if bucket_by is not None:
        names.append(bucket_by)
    for name in names:
        if name in attributes or name == TARGETING_KEY:
            continue
        value = context.get(name)
        if isinstance(value, str):
            attributes[name] = value
        elif isinstance(value, bool | int | float):
            attributes[name] = json.dumps(value)
    return attributes or None


def too_big(size: int) -> OfrepError:
    """A request body over MAX_BODY_BYTES: the one limit a context has besides its key."""
    return invalid_context(f"the request body is {size} bytes; an evaluation request is at "
                           f"most {MAX_BODY_BYTES}")


def reason(resolution: Resolution) -> str:
    """OpenFeature's reason: a rule picked the arm, the bucket split it, or nothing varied;
    DEFAULT when the job had no value for the role's `bucket_by` (served current)."""
    if "rule" in resolution:
        return "TARGETING_MATCH"
    if resolution["bucketing"].get("unit_missing"):
        return "DEFAULT"
    if resolution["stage"] == "canary":
        return "SPLIT"
    return "STATIC"


def evaluation(resolution: Resolution,
               bodies: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An OFREP evaluationSuccess for `resolution`: value = config id, variant = arm.

    OFREP metadata holds only strings, numbers and booleans, so the job's
    attributes that decided (the rule's, the unit's) come as `attr.<name>`, the
    bucketing as `bucketing.version`, `bucketing.bucket_by` (`targetingKey` when
    the job key is the unit), `bucketing.salted` (and `bucketing.unit_missing`),
    a config body (when `bodies` holds it) as its JSON text under `body`
    (`shadow_body` for the shadow's), and the run's id (`run_id`, minted when the
    evaluation was counted: `rolegate.run_ids`).
    """
    bucketing = resolution["bucketing"]
    metadata: dict[str, Any] = {
        "arm": resolution["arm"],
        "stage": resolution["stage"],
        "share": resolution["share"],
        "version": resolution["version"],
        "stale": resolution["stale"],
        "bucketing.version": bucketing["version"],
        "bucketing.bucket_by": bucketing["bucket_by"] or TARGETING_KEY,
        "bucketing.salted": bucketing["salted"],
    }
    if bucketing.get("unit_missing"):
        metadata["bucketing.unit_missing"] = True
    if resolution["shadow"] is not None:
        metadata["shadow"] = resolution["shadow"]
    if "rule" in resolution:
        metadata["rule"] = resolution["rule"]
    if "run_id" in resolution:
        metadata["run_id"] = resolution["run_id"]
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
