"""The online gate view read by criterion: pass rates per key per config, regressions by key."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from tests.conftest import CALLER, OPERATOR, auth

STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}
SPEC = {"tools": [{"name": "lookupOrder", "required": True}, {"name": "verifyIdentity"}],
        "escalation": [{"id": "high-value", "condition": "refund over 1000",
                        "when": [{"field": "amount", "op": "gt", "value": 1000}],
                        "tool": "verifyIdentity"}]}


def setup_role(client: FlaskClient, stage: str) -> None:
    """refunds on cfg_a with candidate cfg_b in `stage`; both configs carry the spec."""
    body: dict[str, Any] = {"current": "cfg_a", "candidate": "cfg_b", "stage": stage}
    if stage == "canary":
        body["share"] = 0.5
    r = client.put("/v1/bindings/refunds", json=body, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json
    for config in ("cfg_a", "cfg_b"):
        r = client.put(f"/v1/configs/{config}", json={"spec": SPEC}, headers=auth(OPERATOR))
        assert r.status_code == 201, r.json


def report(client: FlaskClient, traces: list[dict[str, Any]]) -> None:
    """Ingest a batch of traces."""
    r = client.post("/v1/traces", json={"traces": traces}, headers=auth(CALLER))
    assert r.status_code == 200, r.json


def trace(run_id: str, arm: str, key: str, amount: float, verify: bool) -> dict[str, Any]:
    """A refunds trace; `verify` says whether verifyIdentity was called."""
    tools = ["lookupOrder"] + (["verifyIdentity"] if verify else [])
    return {"run_id": run_id, "role": "refunds", "arm": arm,
            "config": "cfg_a" if arm == "current" else "cfg_b", "key": key, "tools": tools,
            "stamps": STAMPS, "input": {"amount": amount}}


def test_shadow_losing_a_call_is_named_by_criterion_on_paired_jobs(client: FlaskClient) -> None:
    """Shadow runs of the same jobs that skip verifyIdentity are listed under escalation:high-value."""
    setup_role(client, "shadow")
    amounts = [50, 2000, 300, 5000, 80, 1500, 20, 9000, 60, 70]
    report(client, [trace(f"c{i}", "current", f"job-{i}", a, True)
                    for i, a in enumerate(amounts)])
    report(client, [trace(f"s{i}", "shadow", f"job-{i}", a, False)
                    for i, a in enumerate(amounts)])
    view = client.get("/v1/roles/refunds/gate", headers=auth(CALLER)).json
    section = view["by_criterion"]
    assert section["arms"]["current"]["criteria"]["escalation:high-value"]["rate"] == 1.0
    shadow = section["arms"]["shadow"]
    assert shadow["config"] == "cfg_b" and shadow["n"] == 10
    assert shadow["criteria"]["escalation:high-value"]["passed"] == 0
    assert shadow["criteria"]["escalation:high-value"]["skipped"] == 6
    assert shadow["criteria"]["tool:lookupOrder"]["rate"] == 1.0
    (lost,) = section["regressions"]["shadow"]
    assert lost["key"] == "escalation:high-value" and lost["paired"] is True
    assert lost["message"] == "4 cases lost the verifyIdentity call"


def test_canary_rate_drop_by_criterion_without_pairs(client: FlaskClient) -> None:
    """On a canary (different jobs per arm) a criterion whose rate clearly fell is listed."""
    setup_role(client, "canary")
    report(client, [trace(f"c{i}", "current", f"a-{i}", 2000, True) for i in range(30)])
    report(client, [trace(f"k{i}", "candidate", f"b-{i}", 2000, False) for i in range(30)])
    section = client.get("/v1/roles/refunds/gate", headers=auth(CALLER)).json["by_criterion"]
    (drop,) = section["regressions"]["candidate"]
    assert drop["key"] == "escalation:high-value" and drop["paired"] is False
    assert drop["high"] < 0
    assert section["descriptions"]["escalation:high-value"].startswith("when refund over 1000")


def test_config_without_spec_still_shows_invariant_criteria(client: FlaskClient) -> None:
    """A config with no registered spec is scored on the online invariants alone."""
    r = client.put("/v1/bindings/refunds", headers=auth(OPERATOR),
                   json={"current": "cfg_x", "gate": {"invariants": {"max_steps": 3}}})
    assert r.status_code == 201
    report(client, [dict(trace("c1", "current", "j1", 10, True), config="cfg_x")])
    arms = client.get("/v1/roles/refunds/gate", headers=auth(CALLER)).json["by_criterion"]["arms"]
    assert arms["current"]["spec"] is False
    assert arms["current"]["criteria"]["max_steps"]["rate"] == 1.0
