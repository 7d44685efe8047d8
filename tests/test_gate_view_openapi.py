"""Live gate views of every state validate against the router's own /openapi.json.

One router on loopback, real Redis, real traces (tests.population): roles driven into
each state `next.state` takes (awaiting approval, waiting for power, held by policy,
held by the stage deadline, paused, not started, rolled back, stable) and every view
read on the way is checked against the 200 schema of GET /v1/roles/{role}/gate in the
document the same router serves. The schema's enums are generated from the code
(router.openapi.paths.enum_of); a state, wait kind or response rule added to the code
and not to the schema fails here. jsonschema comes with schemathesis (the test extra).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from bindings.models import GatePolicy
from bindings.responses_policy import RESPONSE_NAMES, RESPONSE_RULES
from tests.conftest import CALLER, OPERATOR, auth
from tests.gatekeeping import APPROVAL_STEPS, EVERY_RULE, QUICK_GATE
from tests.population import Population
from tests.servers import wait_for, werkzeug_server

GATE_PATH = "/v1/roles/{role}/gate"
POWERED = {"thresholds": {"min_samples": 20, "min_stage_seconds": 0.0},
           "invariants": {"artifact_exists": ["out.md"]}}
STARVED = {"thresholds": {"min_samples": 500, "min_stage_seconds": 0.0,
                          "stage_deadline_seconds": 0.5, "deadline_action": "hold"},
           "invariants": {"artifact_exists": ["out.md"]}}


@pytest.fixture
def url(app: Flask, quick_buckets: None) -> Iterator[str]:
    """The router on loopback with 1 s comparison buckets."""
    with werkzeug_server(app) as base:
        yield base


def _put(url: str, role: str, **binding: Any) -> None:
    with requests.put(f"{url}/v1/bindings/{role}", json={"current": "cfg-a", **binding},
                      headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 201, answer.text


def _post(url: str, role: str, action: str) -> None:
    with requests.post(f"{url}/v1/bindings/{role}/{action}", json={"reason": "test"},
                       headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 200, answer.text


def _validator(url: str) -> jsonschema.Draft202012Validator:
    """The gate view's 200 schema from the live /openapi.json, its $refs resolvable."""
    with requests.get(f"{url}/openapi.json", timeout=5) as answer:
        spec = answer.json()
    schema = spec["paths"][GATE_PATH]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]})


#: role -> what its view shows once it is in the state the role is there for.
STATES = {
    "approval": lambda n: n["state"] == "awaiting_approval"
    and [w["kind"] for w in n["waits"]] == ["approval"],
    "power": lambda n: n["state"] == "waiting" and "power" in [w["kind"] for w in n["waits"]],
    "held": lambda n: n["state"] == "held" and n["response"]["applied"] == "hold",
    "deadline": lambda n: n["state"] == "held" and n["response"]["rule"] == "deadline"
    and n["deadline"]["action"] == "hold",
    "paused": lambda n: n["state"] == "paused",
    "not-started": lambda n: n["state"] == "not_started",
    "rolled": lambda n: n["state"] == "rolled_back",
    "stable": lambda n: n["state"] == "stable",
}


def test_a_live_view_of_every_state_is_valid_against_the_served_openapi(url: str) -> None:
    """Each state's view, and every view read on the way to it, validates; each state is
    reached (so a schema that refused one would fail the test, not skip it)."""
    _put(url, "approval", candidate="cfg-good", stage="canary", share=0.3,
         steps=APPROVAL_STEPS, gate=QUICK_GATE)
    _put(url, "power", candidate="cfg-good", stage="shadow", share=0.0, steps=[0.5, 1.0],
         gate=POWERED)
    _put(url, "held", candidate="cfg-broken", stage="canary", share=0.5, steps=[0.5, 1.0],
         gate={**QUICK_GATE, "responses": {rule: "hold" for rule in EVERY_RULE}})
    _put(url, "deadline", candidate="cfg-good", stage="canary", share=0.5, steps=[0.5, 1.0],
         gate=STARVED)
    _put(url, "paused", candidate="cfg-good", stage="canary", share=0.5, steps=[0.5, 1.0])
    _post(url, "paused", "pause")
    _put(url, "not-started", candidate="cfg-good")
    _put(url, "rolled", candidate="cfg-good", stage="canary", share=0.5, steps=[0.5, 1.0])
    _post(url, "rolled", "rollback")
    _put(url, "stable")
    # The approval step: one operator move up the ladder, as `rolegate canary` would.
    with requests.post(f"{url}/v1/bindings/approval/canary", json={"share": 0.6,
                       "reason": "test"}, headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 200, answer.text
    # Enough pairs for shadow's tests but not for its power, and too few runs for the
    # starved canary's min_samples: their traffic stops here.
    once = Population(url, ["power", "deadline"], batch=30, tag="once")
    for _ in range(3):
        once.step()
    busy = Population(url, ["approval", "held"], batch=30, tag="busy")
    validator = _validator(url)
    seen: dict[str, dict[str, Any]] = {}
    checked = 0

    def every_state() -> bool:
        nonlocal checked
        busy.step()
        for role, reached in STATES.items():
            if role in seen:
                continue
            with requests.get(f"{url}{GATE_PATH.format(role=role)}", headers=auth(CALLER),
                              timeout=5) as answer:
                assert answer.status_code == 200, answer.text
                view = answer.json()
            errors = sorted(validator.iter_errors(view), key=str)
            assert not errors, f"{role}: {errors[0].message} at {list(errors[0].absolute_path)}"
            checked += 1
            if reached(view["next"]):
                seen[role] = view
        return len(seen) == len(STATES)

    wait_for(every_state, 60.0, f"every state: seen {sorted(seen)} of {sorted(STATES)}",
             interval=0.2)
    assert once.errors == [] and busy.errors == []
    assert checked >= len(STATES)
    assert seen["approval"]["stage"] == "canary" and seen["approval"]["share"] == 0.6
    assert seen["paused"]["paused"] is True


def test_the_schema_refuses_a_state_the_code_does_not_make() -> None:
    """The check can fail: a view whose state, wait kind or response rule is not the code's
    is refused by the same validator, as the hand-written enums refused the real ones."""
    from router.openapi.document import model_schemas

    schemas = model_schemas()  # `next` is the NextView component, generated from the model
    validator = jsonschema.Draft202012Validator({**schemas["NextView"],
                                                 "components": {"schemas": schemas}})
    good = {"action": "hold", "state": "awaiting_approval", "summary": "", "then": None,
            "reason": "", "lines": [], "waits": [{"kind": "approval", "setting": None,
                                                  "have": 0, "need": 1, "until": None,
                                                  "text": ""}],
            "response": {"rule": "deadline", "applied": "hold", "policy": "p"},
            "deadline": {"at": time.time(), "action": "hold", "seconds": 1.0}}
    assert list(validator.iter_errors(good)) == []
    for path, bad in ((("state",), "approving"), (("waits", 0, "kind"), "patience"),
                      (("response", "rule"), "vibes"), (("deadline", "action"), "advance")):
        view: Any = {**good, "waits": [dict(good["waits"][0])],
                     "response": dict(good["response"]), "deadline": dict(good["deadline"])}
        node = view
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = bad
        assert list(validator.iter_errors(view)), path


def test_the_binding_schema_names_the_rules_and_responses_the_model_accepts(
        client: FlaskClient) -> None:
    """gate.responses in the served Binding schema: its keys' pattern and its values' enum are
    the model's own (every rule and criterion:<key> in, a typo out), as the model decides."""
    spec = client.get("/openapi.json").json
    gate = spec["components"]["schemas"]["GatePolicy"]["properties"]["responses"]
    validator = jsonschema.Draft202012Validator(gate)
    good = {**{rule: "warn" for rule in RESPONSE_RULES}, "criterion:tone": "hold"}
    assert list(validator.iter_errors(good)) == []
    GatePolicy(responses=good)  # the model accepts what the schema does
    for bad in ({"seqential": "warn"}, {"criterion:": "hold"}, {"drift": "pause"}):
        assert list(validator.iter_errors(bad)), bad
        with pytest.raises(ValueError):
            GatePolicy(responses=bad)
    assert gate["additionalProperties"]["enum"] == list(RESPONSE_NAMES)
