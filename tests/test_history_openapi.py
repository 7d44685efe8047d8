"""Live history entries, and the rollback a gate view shows, validate against /openapi.json.

A history entry's `details` are a gatekeeper's decision (`gatekeeper.machine.details.
DecisionDetails`) under `gatekeeper`, beside what other writers record (a tripwire's run
id, a restore's version, an operator's notes). The served schema of those details is
generated from the models (`EntryDetails`, `router.openapi.document.ENTRY_DETAILS`); here a
real gatekeeper (`tests.gatekeeping.keeper`) promotes one role, rolls one back and pauses
one on a policy hold over a router on loopback with real traffic, a tripwire rolls a fourth
back, an operator restores and rolls back with notes of their own, and every entry of
every role, and the rolled-back role's gate view, is checked against the document the same
router serves. The router refuses (422) details the schema refuses, so none is ever stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import CALLER, OPERATOR, auth
from tests.gatekeeping import (
    EVERY_RULE,
    QUICK_GATE,
    binding,
    gate_view,
    keeper,
    put_canary,
    tick_until,
)
from tests.population import Population, trace
from tests.servers import werkzeug_server

HISTORY_PATH = "/v1/bindings/{role}/history"
GATE_PATH = "/v1/roles/{role}/gate"
#: Roles the gatekeeper moves, and the action its history entry records.
MOVES = {"promoted": "promote", "rolled": "rollback", "held": "pause"}


@pytest.fixture
def url(app: Flask, quick_buckets: None) -> Iterator[str]:
    """The router on loopback with 1 s comparison buckets."""
    with werkzeug_server(app) as base:
        yield base


def _validator(spec: dict[str, Any], path: str) -> jsonschema.Draft202012Validator:
    """`path`'s GET 200 schema in `spec`, its $refs resolvable."""
    schema = spec["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
        "schema"]
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]})


def _errors(validator: jsonschema.Draft202012Validator, answer: Any) -> list[str]:
    return [f"{e.message} at {list(e.absolute_path)}"
            for e in sorted(validator.iter_errors(answer), key=str)]


def _history(url: str, role: str) -> dict[str, Any]:
    with requests.get(f"{url}{HISTORY_PATH.format(role=role)}", headers=auth(CALLER),
                      timeout=5) as answer:
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found


def _post(url: str, role: str, action: str, body: dict[str, Any]) -> None:
    with requests.post(f"{url}/v1/bindings/{role}/{action}", json=body,
                       headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 200, answer.text


def test_live_history_entries_of_every_writer_are_valid_against_the_served_openapi(
        url: str) -> None:
    """The gatekeeper's promote, rollback and policy pause, a tripwire's rollback, an
    operator's restore and rollback: every entry validates, and each gatekeeper entry
    carries its decision's figures (so the typed schema is what checked them)."""
    put_canary(url, "promoted", "cfg-good", [0.5, 1.0])
    put_canary(url, "rolled", "cfg-broken", [0.5, 1.0])
    put_canary(url, "held", "cfg-broken", [0.5, 1.0], {rule: "hold" for rule in EVERY_RULE})
    tripped = {**QUICK_GATE, "invariants": {"artifact_exists": ["out.md"],
                                            "forbidden_tools": ["delete_all"]}}
    requests.put(f"{url}/v1/bindings/tripped", json={
        "current": "cfg-a", "candidate": "cfg-forbid", "stage": "canary", "share": 0.5,
        "steps": [0.5, 1.0], "gate": tripped}, headers=auth(OPERATOR),
        timeout=5).raise_for_status()
    with keeper(url, "gk-history") as gatekeeper, Population(url, list(MOVES)) as population:
        tick_until(gatekeeper, lambda: (binding(url, "promoted")["stage"] in ("full", "stable")
                                        and binding(url, "rolled")["stage"] == "rolled_back"
                                        and binding(url, "held")["paused"]),
                   "a promotion, a rollback and a policy hold by the gatekeeper")
    assert population.errors == []
    bad = trace("tripped", "cfg-forbid", "candidate", 3, "x")
    with requests.post(f"{url}/v1/traces", json=bad, headers=auth(CALLER), timeout=5) as answer:
        assert answer.status_code == 200 and answer.json()["tripwire"], answer.text
    first = _history(url, "promoted")["entries"][-1]["version"]
    _post(url, "promoted", "rollback", {"reason": "restore", "to_version": first,
                                        "details": {"ticket": "OPS-1"}})
    _post(url, "promoted", "rollback", {"reason": "by hand", "details": {"note": [1, None]}})

    with requests.get(f"{url}/openapi.json", timeout=5) as answer:
        spec = answer.json()
    history = _validator(spec, HISTORY_PATH)
    entries: list[dict[str, Any]] = []
    for role in (*MOVES, "tripped"):
        answer = _history(url, role)
        assert _errors(history, answer) == [], role
        entries += answer["entries"]
    by_gatekeeper = {entry["action"]: entry["details"]["gatekeeper"] for entry in entries
                     if "gatekeeper" in entry["details"]}
    assert set(by_gatekeeper) == set(MOVES.values()), entries
    assert by_gatekeeper["rollback"]["n"] >= 20 and "response" in by_gatekeeper["pause"]
    kinds = {(entry["actor"], entry["action"]) for entry in entries}
    assert ("tripwire", "rollback") in kinds and ("alice", "restore") in kinds, kinds
    noted = [entry["details"] for entry in entries if entry["action"] in ("restore",
                                                                          "rollback")]
    assert {"ticket": "OPS-1"}.items() <= next(d for d in noted if "ticket" in d).items()

    view = gate_view(url, "rolled")
    assert _errors(_validator(spec, GATE_PATH), view) == []
    assert view["previous"]["rollback"]["details"]["gatekeeper"]["verdict"] == "fail"


#: A gatekeeper's details the model refuses, each by one field.
BAD_DECISIONS = ({"n": "many"}, {"response": {"rule": "drift", "applied": "hold"}},
                 {"warnings": [{"rule": "drift"}]}, {"units": 3}, {"gate_reasons": "x"})
#: Names the schema's enums refuse and the router still stores: a gatekeeper newer than
#: the router may name a rule this router does not know, and its move must not be refused.
NEW_NAMES = ({"response": {"rule": "vibes", "applied": "hold", "policy": ""}},)


def test_the_schema_and_the_router_refuse_details_the_model_does_not_make(
        client: FlaskClient) -> None:
    """The check can fail: an entry whose gatekeeper details break the model is refused by
    the served schema, and the router answers 422 to a move that carries them. A name the
    schema's enum lacks is refused by the schema only (`NEW_NAMES`)."""
    spec = client.get("/openapi.json").json
    validator = _validator(spec, HISTORY_PATH)
    assert client.put("/v1/bindings/r", headers=auth(OPERATOR), json={
        "current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.5,
        "steps": [0.5, 1.0]}).status_code == 201
    good = {"verdict": "pass", "n": 30, "passes": 29, "outcome": "applied",
            "response": {"rule": "deadline", "applied": "hold", "policy": "p"}, "extra": 1}
    assert client.post("/v1/bindings/r/pause", headers=auth(OPERATOR), json={
        "reason": "gatekeeper: held", "details": {"gatekeeper": good}}).status_code == 200
    answer = client.get("/v1/bindings/r/history", headers=auth(CALLER)).json
    assert _errors(validator, answer) == []
    assert answer["entries"][0]["details"]["gatekeeper"] == good
    for decision in BAD_DECISIONS:
        entry = {**answer["entries"][0], "details": {"gatekeeper": decision}}
        assert _errors(validator, {**answer, "entries": [entry]}), decision
        refused = client.post("/v1/bindings/r/resume", headers=auth(OPERATOR), json={
            "reason": "r", "details": {"gatekeeper": decision}})
        assert refused.status_code == 422, (decision, refused.json)
    assert len(client.get("/v1/bindings/r/history", headers=auth(CALLER)).json["entries"]) == 2
    for decision in NEW_NAMES:
        entry = {**answer["entries"][0], "details": {"gatekeeper": decision}}
        assert _errors(validator, {**answer, "entries": [entry]}), decision
        assert client.post("/v1/bindings/r/resume", headers=auth(OPERATOR), json={
            "reason": "r", "details": {"gatekeeper": decision}}).status_code == 200


#: A newer gatekeeper's decision: figures this router's sections do not know, in a section
#: it does (`response`, `units`, a `criteria` key: they ignore unknown keys) and beside them.
NEWER_DECISION = {
    "verdict": "fail", "n": 30, "newer_figure": {"a": 1},
    "response": {"rule": "units", "applied": "rollback", "policy": "p", "escalated_to": "oncall"},
    "criteria": [{"key": "answered", "passed": 3, "newer_count": 2}],
    "units": {"log_e": 3.5, "threshold": 3.0, "alpha": 0.05, "reject": True, "horizon": None,
              "leading": "cost", "metrics": [], "repeats": False, "repeats_why": "",
              "newer_metric_count": 4}}


def test_a_moves_details_are_stored_whole(client: FlaskClient) -> None:
    """What the router acknowledges it stores whole: a figure inside a known section that
    this version's model does not know is kept, not dropped, beside the writer's own keys;
    a whole number sent for a count is kept as the count the schema gives."""
    assert client.put("/v1/bindings/r", headers=auth(OPERATOR), json={
        "current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.5,
        "steps": [0.5, 1.0]}).status_code == 201
    sent = {**NEWER_DECISION, "passes": 29.0}
    assert client.post("/v1/bindings/r/rollback", headers=auth(OPERATOR), json={
        "reason": "gatekeeper: units", "details": {"gatekeeper": sent,
                                                   "ticket": "OPS-2"}}).status_code == 200
    history = client.get("/v1/bindings/r/history", headers=auth(CALLER)).json
    details = history["entries"][0]["details"]
    assert details == {"summary": details["summary"], "ticket": "OPS-2",
                       "gatekeeper": {**NEWER_DECISION, "passes": 29}}
    assert isinstance(details["gatekeeper"]["passes"], int)
    assert _errors(_validator(client.get("/openapi.json").json, HISTORY_PATH), history) == []


@pytest.mark.parametrize("figure, value, says", [
    ("n", True, "expected a number, got true"),
    ("passes", "30", 'expected a number, got "30"'),
    ("deadline", "yes", 'expected true or false, got "yes"'),
    ("deadline", 1, "expected true or false, got 1"),
])
def test_a_figure_of_another_json_type_is_a_422_naming_it(client: FlaskClient, figure: str,
                                                          value: Any, says: str) -> None:
    """A move's details hold the gatekeeper's figures to their JSON types (lax reading would
    take true as 1, "30" as 30, "yes" or 1 as true); nothing is written."""
    created = client.put("/v1/bindings/r", headers=auth(OPERATOR), json={
        "current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1})
    assert created.status_code == 201, created.json
    before = created.json["version"]
    answer = client.post("/v1/bindings/r/rollback", headers=auth(OPERATOR),
                         json={"reason": "x", "details": {"gatekeeper": {figure: value}}})
    assert answer.status_code == 422, answer.json
    errors = answer.json["error"]["details"]["errors"]
    assert {"field": f"details.gatekeeper.{figure}", "message": says} in errors
    assert client.get("/v1/bindings/r", headers=auth(OPERATOR)).json["version"] == before
