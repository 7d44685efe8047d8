"""Every number in every request body is a JSON number: true/false and "0.5" are 422.

Pydantic's lax mode reads `true` as 1 and `"0.5"` as 0.5, so
`POST /v1/bindings/<role>/canary {"share": true}` once put the role on full.
The walk reads every request body schema of the OpenAPI document, finds each
field typed number or integer (nested objects, lists, maps, either side of a
union), sends a boolean and a numeric string there, and holds the answer to
422 naming that field. A body or field added later is walked too.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from tests.conftest import OPERATOR, TOKENS, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
TRACE = {"run_id": "n1", "role": "r", "config": "cfg_b", "arm": "candidate", "key": "k",
         "stamps": STAMPS, "steps": [{"tool": "read"}]}
#: A body each operation takes, so an answer is about the one field made bad.
BASES: dict[tuple[str, str], Any] = {
    ("put", "/v1/bindings/{role}"): {"current": "cfg_a"},
    ("post", "/v1/bindings/{role}/canary"): {"reason": "walk", "share": 0.5},
    ("post", "/v1/bindings/{role}/rollback"): {"reason": "walk"},
    ("post", "/v1/gatekeeper/lease"): {"holder": "walk", "ttl_s": 5},
    ("post", "/v1/roles/{role}/offline"): {"config": "cfg_b", "passed": True},
    ("post", "/v1/traces"): TRACE,
    ("post", "/v1/configs/{config}/criteria/check"): {"trace": TRACE},
}
BAD_VALUES = (True, False, "0.5")


@pytest.fixture
def client(redis_url: str) -> Iterator[FlaskClient]:
    """A router with role `r` on a canary (cfg_a current, cfg_b candidate)."""
    app: Flask = create_app({"redis_url": redis_url, "testing": True, "tokens": TOKENS})
    client = app.test_client()
    r = client.put("/v1/bindings/r", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.1})
    assert r.status_code == 201, r.json
    r = client.put("/v1/configs/cfg_walk", headers=auth(OPERATOR),
                   json={"spec": {"instructions": [{"id": "tone", "text": "Be brief."}]}})
    assert r.status_code == 201, r.json
    yield client
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def number_fields(spec: dict[str, Any], schema: dict[str, Any],
                  path: tuple[Any, ...] = (), seen: frozenset[str] = frozenset(),
                  ) -> Iterator[tuple[Any, ...]]:
    """Every path in `schema` to a number or integer: keys, 0 for list items, "k" for map values."""
    ref = schema.get("$ref")
    if ref is not None:
        if ref in seen:
            return
        seen = seen | {ref}
    schema = _resolve(spec, schema)
    branches = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
    kinds = {kind for node in (schema, *(_resolve(spec, b) for b in branches))
             for kind in _kinds(node)}
    # A field that takes text or a boolean as well (an OFREP context value) is no number field.
    if kinds & {"number", "integer"} and not kinds & {"string", "boolean"}:
        yield path
    for branch in (*branches, *schema.get("allOf", ())):
        if not (_kinds(_resolve(spec, branch)) & {"number", "integer"}):
            yield from number_fields(spec, branch, path, seen)
    for name, sub in schema.get("properties", {}).items():
        yield from number_fields(spec, sub, (*path, name), seen)
    if isinstance(schema.get("items"), dict):
        yield from number_fields(spec, schema["items"], (*path, 0), seen)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from number_fields(spec, schema["additionalProperties"], (*path, "k"), seen)


def _kinds(schema: dict[str, Any]) -> set[str]:
    kinds = schema.get("type")
    return {kinds} if isinstance(kinds, str) else set(kinds or ())


def with_value(base: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of `base` with `value` at `path` (objects and lists made on the way)."""
    body = copy.deepcopy(base)
    node = body
    for here, after in itertools.pairwise(path):
        kind = list if isinstance(after, int) else dict
        if isinstance(here, int):
            if not node or not isinstance(node[0], kind):
                node[:] = [kind()]
            node = node[0]
        else:
            if not isinstance(node.get(here), kind):
                node[here] = kind()
            node = node[here]
    last = path[-1]
    if isinstance(last, int):
        node[:] = [value]
    else:
        node[last] = value
    return body


def _bodies(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if isinstance(op, dict) and "requestBody" in op:
                schema = op["requestBody"]["content"].get("application/json", {}).get("schema")
                if schema is not None:
                    yield method, path, schema


def _base(method: str, path: str, field: tuple[Any, ...]) -> Any:
    """The operation's base body; for a trace batch (a list, or under "traces") a batch of one."""
    base = BASES.get((method, path), {})
    if path == "/v1/traces" and field[0] == 0:
        return [base]
    if path == "/v1/traces" and field[0] == "traces":
        return {"traces": [base]}
    if path == "/v1/bindings/{role}" and field[0] == "binding":
        return {"binding": base}
    return base


def _named(answer: dict[str, Any], dotted: str) -> bool:
    """Whether a 422 answer blames the field at `dotted` (a union adds its branch names)."""
    error = answer.get("error", {})
    want = dotted.split(".")
    for field in (e["field"] for e in error.get("details", {}).get("errors", [])):
        # The path's parts in order; a union puts its branch name between them.
        parts = iter(field.split("."))
        if all(part in parts for part in want):
            return True
    # POST /v1/traces refuses a trace with its index and the reason, naming the field.
    inner = dotted.removeprefix("traces.").removeprefix("0.")
    reasons = [r["reason"] for r in error.get("details", {}).get("refused", [])]
    return any(reason.startswith(inner + ":") or f" {inner}:" in reason for reason in reasons)


def test_every_number_in_every_body_refuses_booleans_and_numeric_text(
        client: FlaskClient) -> None:
    """A boolean or numeric string in any number field of any body: 422 naming the field."""
    spec = client.get("/openapi.json").json
    accepted, walked = [], set()
    for method, path, schema in _bodies(spec):
        url = path.replace("{role}", "r").replace("{config}", "cfg_walk")
        for field in dict.fromkeys(number_fields(spec, schema)):
            dotted = ".".join(str(part) for part in field)
            walked.add(f"{method.upper()} {path} {dotted}")
            for value in BAD_VALUES:
                body = with_value(_base(method, path, field), field, value)
                r = client.open(url, method=method.upper(), json=body,
                                headers={**auth(OPERATOR), "If-Match": "*"})
                if r.status_code != 422 or not _named(r.json, dotted):
                    accepted.append(f"{method.upper()} {url} {dotted}={value!r}: "
                                    f"{r.status_code} {r.get_data(as_text=True)[:160]}")
    assert accepted == [], "\n".join(accepted)
    # The walk reached the bodies the issue names (bindings, gate policy, traces, lease...).
    for expected in ("POST /v1/bindings/{role}/canary share",
                     "PUT /v1/bindings/{role} gate.thresholds.min_pass_rate",
                     "PUT /v1/bindings/{role} binding.steps.0",
                     "POST /v1/traces cost_usd", "POST /v1/gatekeeper/lease ttl_s",
                     "POST /v1/bindings/{role}/rollback to_version",
                     "POST /v1/roles/{role}/offline planned_runs"):
        assert expected in walked, sorted(walked)
    binding = client.get("/v1/bindings/r", headers=auth(OPERATOR)).json["binding"]
    assert (binding["stage"], binding["share"]) == ("canary", 0.1)


def test_a_boolean_share_leaves_the_role_where_it_was(client: FlaskClient) -> None:
    """The issue's case: {"share": true} is 422 and the role stays on its canary."""
    for share in (True, "0.5"):
        r = client.post("/v1/bindings/r/canary", headers=auth(OPERATOR),
                        json={"reason": "x", "share": share})
        assert r.status_code == 422, r.json
        assert r.json["error"]["details"]["errors"][0]["field"] == "share"
    r = client.post("/v1/bindings/r/canary", headers=auth(OPERATOR),
                    json={"reason": "x", "share": 1})
    assert r.status_code == 200 and r.json["binding"]["share"] == 1.0
