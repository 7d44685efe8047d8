"""The config registry API: specs stored with their criteria, criteria diffs, checks."""

from __future__ import annotations

import copy
from typing import Any

import redis
from flask.testing import FlaskClient

from gatekeeper.checks.spec import Spec
from gatekeeper.store.configs import ConfigStore
from tests.conftest import CALLER, OPERATOR, auth

SPEC: dict[str, Any] = {
    "instructions": [{"id": "tone", "text": "Be brief."}],
    "output_schema": {"type": "object", "required": ["decision"],
                      "properties": {"decision": {"type": "string"}}},
    "tools": [{"name": "lookupOrder"}, {"name": "verifyIdentity"}],
    "escalation": [{"id": "high-value", "condition": "refund over 1000",
                    "when": [{"field": "amount", "op": "gt", "value": 1000}],
                    "tool": "verifyIdentity"}],
}
STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}


def put(client: FlaskClient, config: str, spec: dict[str, Any], **headers: str) -> Any:
    """PUT a spec as the operator."""
    return client.put(f"/v1/configs/{config}", json={"spec": spec},
                      headers={**auth(OPERATOR), **headers})


def test_put_stores_spec_and_generated_criteria(client: FlaskClient) -> None:
    """A registered config answers with its criteria, readable by a caller."""
    r = put(client, "cfg_a", SPEC)
    assert r.status_code == 201, r.json
    assert r.json["version"] == 1
    assert r.json["diff"]["summary"].startswith("4 added")
    r = client.get("/v1/configs/cfg_a/criteria", headers=auth(CALLER))
    assert r.status_code == 200
    assert [c["key"] for c in r.json["criteria"]] == [
        "output:/decision", "actions:allowed", "escalation:high-value", "instruction:tone"]
    assert client.get("/v1/configs", headers=auth(CALLER)).json["configs"] == ["cfg_a"]


def test_diff_between_two_configs_lists_added_removed_changed(client: FlaskClient) -> None:
    """The diff endpoint names criteria by key across two configs."""
    put(client, "cfg_a", SPEC)
    newer = copy.deepcopy(SPEC)
    newer["instructions"] = [{"id": "tone", "text": "Keep it short and kind."}]
    newer["escalation"][0]["when"][0]["value"] = 500
    newer["tools"].append({"name": "issueRefund", "required": True})
    del newer["output_schema"]
    put(client, "cfg_b", newer)
    r = client.get("/v1/configs/cfg_a/criteria/diff/cfg_b", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    assert [c["key"] for c in r.json["added"]] == ["tool:issueRefund"]
    assert [c["key"] for c in r.json["removed"]] == ["output:/decision"]
    assert [c["key"] for c in r.json["changed"]] == ["actions:allowed", "escalation:high-value"]
    assert [c["key"] for c in r.json["reworded"]] == ["instruction:tone"]


def test_rewording_keeps_policy_since_and_a_rule_change_moves_it(redis_conn: redis.Redis) -> None:
    """Golden sets rely on policy_since: only a changed check starts a new policy."""
    clock = iter([100.0, 200.0, 300.0])
    store = ConfigStore(redis_conn, clock=lambda: next(clock))
    store.put("cfg", Spec.model_validate(SPEC), actor="alice")
    reworded = copy.deepcopy(SPEC)
    reworded["instructions"][0]["text"] = "Answer briefly."
    record, _ = store.put("cfg", Spec.model_validate(reworded), actor="alice")
    assert (record.version, record.policy_since) == (2, 100.0)
    reworded["escalation"][0]["tool"] = "lookupOrder"
    record, _ = store.put("cfg", Spec.model_validate(reworded), actor="alice")
    assert (record.version, record.policy_since) == (3, 300.0)


def test_stale_if_match_is_refused_and_nothing_written(client: FlaskClient) -> None:
    """A writer naming an old version gets 409 and the stored spec stays."""
    put(client, "cfg_a", SPEC)
    r = put(client, "cfg_a", {"tools": []}, **{"If-Match": "7"})
    assert r.status_code == 409 and r.json["error"]["details"]["current_version"] == 1
    assert client.get("/v1/configs/cfg_a", headers=auth(CALLER)).json["version"] == 1


def test_bad_spec_and_unknown_config_are_clear_errors(client: FlaskClient) -> None:
    """An invalid spec is a 422 naming the field; an unknown config a 404; a caller may not write."""
    r = put(client, "cfg_a", {"output_schema": {"type": "strnig"}})
    assert r.status_code == 422 and "output_schema" in r.json["error"]["message"]
    assert client.get("/v1/configs/nope", headers=auth(CALLER)).status_code == 404
    r = client.put("/v1/configs/cfg_a", json={"spec": SPEC}, headers=auth(CALLER))
    assert r.status_code == 403
    assert put(client, "bad id!", SPEC).status_code in (404, 422)


def test_check_scores_a_trace_against_stored_criteria(client: FlaskClient) -> None:
    """A trace that skips the demanded escalation call fails that rule's key."""
    put(client, "cfg_a", SPEC)
    trace = {"run_id": "r1", "role": "refunds", "config": "cfg_a", "arm": "current",
             "tools": ["lookupOrder"], "output_text": '{"decision": "refund"}',
             "stamps": STAMPS, "input": {"amount": 4000}}
    r = client.post("/v1/configs/cfg_a/criteria/check", json={"trace": trace},
                    headers=auth(CALLER))
    assert r.status_code == 200, r.json
    assert r.json["failed"] == ["escalation:high-value"]
    assert r.json["verdicts"]["instruction:tone"] is None
