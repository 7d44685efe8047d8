"""The gate view's `next` section (what the gatekeeper does next) and `previous` (a rollback's evidence)."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from bindings.models import VersionedBinding
from gatekeeper.machine.decide import decide, evidence_from_view
from tests.conftest import CALLER, OPERATOR, auth

OP = auth(OPERATOR)
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
GATE = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.8, "min_stage_seconds": 600},
        "invariants": {"forbidden_tools": ["web_write"]}}


def _traces(client: FlaskClient, arm: str, count: int, start: int = 0,
            tools: tuple[str, ...] = ("read",)) -> None:
    batch = [{"run_id": f"{arm}-{start + i}", "role": "summarizer", "arm": arm,
              "config": "cfg_a" if arm == "current" else "cfg_b", "key": f"job-{start + i}",
              "tools": list(tools), "cost_usd": 0.01, "stamps": STAMPS} for i in range(count)]
    r = client.post("/v1/traces", json={"traces": batch}, headers=auth(CALLER))
    assert r.status_code in (200, 207), r.json


def _canary(client: FlaskClient) -> None:
    r = client.put("/v1/bindings/summarizer", headers=OP,
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.1, "gate": GATE})
    assert r.status_code == 201, r.json


def _gate(client: FlaskClient) -> dict[str, Any]:
    r = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    view: dict[str, Any] = r.json
    return view


def test_next_says_how_many_runs_and_how_long_are_still_needed(client: FlaskClient) -> None:
    """A young canary with 5 of 20 runs needs 15 more and holds for min_stage_seconds."""
    _canary(client)
    _traces(client, "candidate", 5)
    nxt = _gate(client)["next"]
    assert nxt["action"] == "hold" and nxt["state"] == "waiting"
    assert nxt["lines"][0] == "needs 15 more candidate runs (min_samples 20)"
    assert nxt["lines"][1].startswith("holds until ") and "(min_stage_seconds)" in nxt["lines"][1]
    assert nxt["lines"][2] == "next: canary 0.5"
    assert [w["kind"] for w in nxt["waits"]] == ["runs", "time"]


def test_next_is_the_gatekeepers_own_decision(client: FlaskClient) -> None:
    """The section's action is decide() on the same view, as the gatekeeper's tick reads it."""
    _canary(client)
    _traces(client, "candidate", 25)
    view = _gate(client)
    record = VersionedBinding.model_validate(
        client.get("/v1/bindings/summarizer", headers=OP).json)
    decision = decide("summarizer", record, evidence_from_view(view), view["time"])
    assert view["next"]["action"] == decision.action.value
    assert view["next"]["reason"] == decision.reason


def test_next_names_who_paused_and_why(client: FlaskClient) -> None:
    """A paused role's section says "paused by alice: <reason>"."""
    _canary(client)
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "launch freeze"},
                    headers=OP)
    assert r.status_code == 200
    nxt = _gate(client)["next"]
    assert nxt["state"] == "paused"
    assert nxt["lines"][0].startswith("paused by alice: launch freeze")


def test_rolled_back_view_keeps_the_failed_stages_evidence(client: FlaskClient) -> None:
    """After a rollback `previous` holds the ended stage's arms, numbers and the rollback."""
    _canary(client)
    _traces(client, "current", 30)
    _traces(client, "candidate", 30)
    _traces(client, "candidate", 1, start=100, tools=("web_write",))  # the tripwire fires
    view = _gate(client)
    assert view["stage"] == "rolled_back"
    assert view["arms"]["candidate"]["n"] == 0  # the new window is empty
    previous = view["previous"]
    assert previous["stage"] == "canary" and previous["share"] == 0.1
    assert previous["arms"]["candidate"]["n"] == 31
    assert previous["arms"]["candidate"]["verdict"] == "fail"
    assert previous["arms"]["current"]["n"] == 30
    assert previous["rollback"]["actor"] == "tripwire"
    assert view["next"]["state"] == "rolled_back"


def test_no_previous_section_outside_a_rollback(client: FlaskClient) -> None:
    """A live stage has no `previous` section."""
    _canary(client)
    assert _gate(client)["previous"] is None


def test_gate_view_of_configs_the_registry_never_held(client: FlaskClient) -> None:
    """A binding naming configs like summarizer@2026-10-02 (no spec possible) gets its view."""
    r = client.put("/v1/bindings/summarizer", headers=OP,
                   json={"current": "summarizer@2026-10-02",
                         "candidate": "summarizer@2026-11-18", "stage": "canary",
                         "share": 0.1})
    assert r.status_code == 201, r.json
    view = _gate(client)
    assert view["arms"]["candidate"]["config"] == "summarizer@2026-11-18"
    assert view["next"]["state"] == "waiting"
