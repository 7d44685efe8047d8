"""Bad input gets a clear 4xx JSON error and writes nothing: never a 500, never a partial write.

Each test is a regression for an input that once answered 500 or stored a record
that could not be read back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from bindings.models import VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from tests.conftest import OPERATOR, auth

OP = {**auth(OPERATOR), "Content-Type": "application/json"}
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
SPEC = {"output_schema": {"type": "object", "required": ["decision"],
                          "properties": {"decision": {"type": "string",
                                                      "enum": ["approve", "deny"]}}}}


def _trace(run_id: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "role": "summarizer", "config": "cfg_a",
                            "arm": "current", "tools": ["read"], "stamps": STAMPS}
    body.update(fields)
    return body


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
    error: dict[str, Any] = response.json["error"]
    assert set(error) == {"code", "message", "details"} and error["message"]
    return error


def _role(client: FlaskClient) -> None:
    r = client.put("/v1/bindings/summarizer", headers=OP,
                   json={"current": "cfg_a", "candidate": "cfg_b"})
    assert r.status_code == 201, r.json


def _nothing_stored(client: FlaskClient, redis_conn: redis.Redis) -> None:
    """No trace of role summarizer reached Redis: no stream, no run id, no aggregate."""
    assert redis_conn.keys("rolegate:{summarizer}:traces:*") == []
    assert redis_conn.keys("rolegate:{summarizer}:claims:*") == []
    assert redis_conn.keys("rolegate:{summarizer}:window:*") == []
    assert redis_conn.keys("rolegate:{summarizer}:pending:*") == []
    gate = client.get("/v1/roles/summarizer/gate", headers=OP)
    assert gate.status_code == 200 and gate.json["arms"]["current"]["n"] == 0


@pytest.mark.parametrize("path", ["/v1/bindings/summarizer", "/v1/traces",
                                  "/v1/gatekeeper/lease", "/v1/configs/cfg_a"])
@pytest.mark.parametrize("body", ["[" * 100_000 + "]" * 100_000,
                                  '{"a":' * 50_000 + "1" + "}" * 50_000,
                                  '{"current": "cfg_a", "description": ' + "[" * 100 + "]" * 100
                                  + "}"],
                         # Named: a 200 KB id would be PYTEST_CURRENT_TEST, past what execve
                         # takes, and the first server this test starts could not start.
                         ids=["arrays-100000", "objects-50000", "description-100"])
def test_deeply_nested_body_is_a_400(client: FlaskClient, path: str, body: str) -> None:
    """A body nested past the depth limit is a 400, not a RecursionError 500."""
    method = client.post if path in ("/v1/traces", "/v1/gatekeeper/lease") else client.put
    _error(method(path, data=body, headers=OP), 400)


@pytest.mark.parametrize("field, value", [
    ("output_text", '"ok \\ud800"'), ("input", '{"q": "\\udfff"}'),
    ("steps", '[{"tool": "read", "args": {"x": "\\ud83d"}}]'), ("input", '{"\\ud800": 1}'),
])
def test_lone_surrogate_in_a_trace_is_refused_and_nothing_is_stored(
        client: FlaskClient, redis_conn: redis.Redis, field: str, value: str) -> None:
    """An unpaired UTF-16 surrogate escape is refused before the store can half-write it."""
    _role(client)
    body = json.dumps(_trace("run-1", **{field: "__V__"})).replace('"__V__"', value)
    error = _error(client.post("/v1/traces", data=body, headers=OP), 422)
    assert "surrogate" in error["message"]
    _nothing_stored(client, redis_conn)


def test_a_paired_surrogate_is_ordinary_text(client: FlaskClient) -> None:
    """An escaped surrogate pair (an emoji) is one character and is stored as such."""
    _role(client)
    body = json.dumps(_trace("run-1", output_text="__V__")).replace('"__V__"', '"\\ud83d\\ude00"')
    r = client.post("/v1/traces", data=body, headers=OP)
    assert r.status_code == 200, r.json


@pytest.mark.parametrize("field, value", [
    ("cost_usd", "Infinity"), ("cost_usd", "1e400"), ("latency_s", "NaN"),
    ("cost_usd", "1e300"), ("latency_s", "1e300"), ("tokens", "1" + "0" * 30),
    ("step_count", "1" + "0" * 20),
])
def test_out_of_range_trace_numbers_are_refused_and_nothing_is_stored(
        client: FlaskClient, redis_conn: redis.Redis, field: str, value: str) -> None:
    """A non-finite or counter-overflowing number is a 422; none is half-written by the script."""
    _role(client)
    body = json.dumps(_trace("run-1", **{field: "__V__"})).replace('"__V__"', value)
    _error(client.post("/v1/traces", data=body, headers=OP), 422)
    _nothing_stored(client, redis_conn)
    # The run id was never stored, so a corrected retry counts.
    r = client.post("/v1/traces", json=_trace("run-1"), headers=OP)
    assert r.status_code == 200 and r.json["accepted"] == 1, r.json


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "1e999", "1" * 250 + "e99"])
def test_non_finite_number_in_a_free_form_trace_field_is_refused(
        client: FlaskClient, redis_conn: redis.Redis, value: str) -> None:
    """NaN in a trace's `input` is a 422 on the fast path too, not silently stored as null."""
    _role(client)
    body = json.dumps(_trace("run-1", input={"amount": "__V__"}))
    error = _error(client.post("/v1/traces", data=body.replace('"__V__"', value), headers=OP),
                   422)
    assert "finite" in error["message"]
    _nothing_stored(client, redis_conn)


@pytest.mark.parametrize("value", ['"\\ud800"', "NaN", "Infinity"])
def test_one_unstorable_trace_does_not_refuse_its_batch(client: FlaskClient,
                                                        value: str) -> None:
    """A NaN or unpaired surrogate refuses its own trace (207); the rest of the batch is stored."""
    _role(client)
    bad = _trace("run-1", input={"amount": "__V__"})
    body = json.dumps({"traces": [_trace("run-0"), bad, _trace("run-2")]})
    r = client.post("/v1/traces", data=body.replace('"__V__"', value), headers=OP)
    assert r.status_code == 207, r.get_data(as_text=True)
    assert [x["status"] for x in r.json["results"]] == ["accepted", "refused", "accepted"]
    assert r.json["results"][1]["run_id"] == "run-1"
    gate = client.get("/v1/roles/summarizer/gate", headers=OP).json
    assert gate["arms"]["current"]["n"] == 2


def test_text_that_merely_mentions_nan_is_accepted(client: FlaskClient) -> None:
    """The strict parser refuses NaN numbers only: "NaN" inside a string is ordinary text."""
    _role(client)
    r = client.post("/v1/traces", headers=OP,
                    json=_trace("run-1", output_text="ratio: NaN, Infinity, 1e400",
                                input={"note": ", NaN"}))
    assert r.status_code == 200 and r.json["accepted"] == 1, r.json


def test_restoring_an_impossibly_large_version_is_a_404(client: FlaskClient) -> None:
    """to_version beyond any Redis list index is a 404, not a Redis error 500."""
    _role(client)
    body = '{"reason": "restore", "to_version": 1' + "0" * 40 + "}"
    _error(client.post("/v1/bindings/summarizer/rollback", data=body, headers=OP), 404)
    assert client.get("/v1/bindings/summarizer", headers=OP).json["version"] == 1


@pytest.mark.parametrize("schema", [
    {"type": {"x": 1}},
    {"type": "object", "properties": {"decision": {"type": ["string", {}]}}},
    {"type": "object", "required": ["decision"], "properties": {"decision": {"enum": 5}}},
    {"type": "object", "required": ["decision"], "properties": {"decision": {"enum": None}}},
])
def test_malformed_output_schema_is_a_422_and_nothing_is_stored(
        client: FlaskClient, schema: dict[str, Any]) -> None:
    """A schema `type` that is not a name, or an `enum` that is not a list, is refused."""
    _error(client.put("/v1/configs/cfg_a", headers=OP, json={"spec": {"output_schema": schema}}),
           422)
    _error(client.get("/v1/configs/cfg_a", headers=OP), 404)


def test_nan_in_a_spec_clause_is_refused(client: FlaskClient) -> None:
    """A NaN clause value would be stored as null and change the rule: it is a 422."""
    spec = {"escalation": [{"id": "big", "condition": "large refunds", "answer": "escalate",
                            "when": [{"field": "amount", "op": "gt", "value": "__V__"}]}]}
    body = json.dumps({"spec": spec}).replace('"__V__"', "NaN")
    _error(client.put("/v1/configs/cfg_a", data=body, headers=OP), 422)
    _error(client.get("/v1/configs/cfg_a", headers=OP), 404)


def test_lone_surrogate_in_feedback_is_a_400_and_nothing_is_stored(
        client: FlaskClient, redis_conn: redis.Redis) -> None:
    """A correction holding an unpaired surrogate is refused before it is appended."""
    _role(client)
    assert client.post("/v1/traces", json=_trace("run-1"), headers=OP).status_code == 200
    body = '{"tier": "negative", "role": "summarizer", "correction": {"text": "\\ud800"}}'
    _error(client.post("/v1/traces/run-1/feedback", data=body, headers=OP), 400)
    assert redis_conn.keys("rolegate:{summarizer}:feedback*") == []


def test_nan_in_an_offline_verdict_is_refused(client: FlaskClient) -> None:
    """A suite verdict with a NaN pass rate is a 422, not stored with the number lost."""
    body = ('{"config": "cfg_b", "passed": true, '
            '"scenarios": {"s1": {"verdict": "pass", "pass_rate": NaN}}}')
    _error(client.post("/v1/roles/summarizer/offline", data=body, headers=OP), 422)
    _error(client.get("/v1/roles/summarizer/offline/cfg_b", headers=OP), 404)


@pytest.mark.parametrize("query", ["window=inf", "min_age=inf", "window=nan", "min_age=-1"])
def test_non_finite_golden_window_is_a_400(client: FlaskClient, query: str) -> None:
    """An infinite or NaN golden-sample window is a 400, not an OverflowError 500."""
    _role(client)
    _error(client.get(f"/v1/roles/summarizer/golden?{query}", headers=OP), 400)


def test_restoring_a_shadow_version_still_needs_an_offline_pass(client: FlaskClient) -> None:
    """Restore into shadow is refused (409, nothing written) once the candidate's suite failed."""
    client.put("/v1/bindings/summarizer", headers=OP,
               json={"current": "cfg_a", "candidate": "cfg_b",
                     "gate": {"require_offline_pass": True}})
    verdict = {"config": "cfg_b", "passed": True}
    assert client.post("/v1/roles/summarizer/offline", headers=OP, json=verdict).status_code == 201
    r = client.post("/v1/bindings/summarizer/promote", headers=OP, json={"reason": "shadow"})
    assert r.status_code == 200 and r.json["binding"]["stage"] == "shadow", r.json
    r = client.post("/v1/bindings/summarizer/rollback", headers=OP, json={"reason": "stop"})
    assert r.status_code == 200 and r.json["version"] == 3, r.json
    failed = {"config": "cfg_b", "passed": False, "reasons": ["suite failed"]}
    assert client.post("/v1/roles/summarizer/offline", headers=OP, json=failed).status_code == 201
    error = _error(client.post("/v1/bindings/summarizer/rollback", headers=OP,
                               json={"reason": "restore", "to_version": 2}), 409)
    assert error["details"]["missing"] == "offline_pass"
    assert client.get("/v1/bindings/summarizer", headers=OP).json["version"] == 3


def test_a_vanishingly_small_alpha_does_not_break_the_gatekeeper(client: FlaskClient) -> None:
    """alpha=1e-300 is a valid policy; deciding on it must not raise (it stopped every tick)."""
    r = client.put("/v1/bindings/summarizer", headers=OP,
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.5, "gate": {"thresholds": {"alpha": 1e-300,
                                                                 "min_stage_seconds": 0}}})
    assert r.status_code == 201, r.json
    record = VersionedBinding.model_validate(r.json)
    evidence = Evidence(verdict="pass", n=100, passes=90, current_n=100, current_passes=95)
    decision = decide("summarizer", record, evidence, now=record.binding.stage_since or 0.0)
    assert decision.action is Action.ADVANCE


@pytest.mark.parametrize("value, field", [(5, "a note"), (["x"], {"x": 1}), ({"k": 1}, "text")])
def test_a_contains_clause_of_another_type_never_fails_the_gate_view(
        client: FlaskClient, value: Any, field: Any) -> None:
    """A spec's `contains` value that cannot be in the input field is a non-match, not a 500."""
    spec = {"escalation": [{"id": "r1", "condition": "c", "answer": "escalate",
                            "when": [{"field": "note", "op": "contains", "value": value}]}]}
    assert client.put("/v1/configs/cfg_a", headers=OP, json={"spec": spec}).status_code == 201
    run = _trace("run-1", input={"note": field}, output_text="escalate")
    r = client.post("/v1/configs/cfg_a/criteria/check", headers=OP, json={"trace": run})
    assert r.status_code == 200 and r.json["verdicts"] == {"escalation:r1": None}, r.json
    _role(client)
    assert client.post("/v1/traces", headers=OP, json=run).status_code == 200
    assert client.get("/v1/roles/summarizer/gate", headers=OP).status_code == 200


def test_calibrating_too_many_thresholds_is_a_400(client: FlaskClient) -> None:
    """Each h replays every stored run: thousands of them in one request are refused up front."""
    _role(client)
    query = "&".join(f"h={h}" for h in range(1, 1002))
    _error(client.get(f"/v1/roles/summarizer/drift/calibrate?{query}", headers=OP), 400)
    query = "&".join(f"h={h}" for h in range(1, 51))
    r = client.get(f"/v1/roles/summarizer/drift/calibrate?{query}", headers=OP)
    assert r.status_code == 200, r.json


def test_a_trace_with_too_many_distinct_tools_is_refused_alone(client: FlaskClient) -> None:
    """Thousands of distinct tool names in one trace are refused (207), the rest stored."""
    client.put("/v1/bindings/summarizer", json={"current": "cfg_a"}, headers=auth(OPERATOR))
    stamps = {"agent_version": "1", "instruction_hash": "h", "model_id": "m",
              "tool_schema_hash": "t"}
    good = {"run_id": "ok-1", "role": "summarizer", "config": "cfg_a", "arm": "current",
            "tools": ["search"], "stamps": stamps}
    bad = {**good, "run_id": "bad-1", "tools": [f"tool{i}" for i in range(5000)]}
    r = client.post("/v1/traces", json={"traces": [good, bad]}, headers=auth(OPERATOR))
    assert r.status_code == 207, r.json
    by_id = {res["run_id"]: res for res in r.json["results"]}
    assert by_id["ok-1"]["status"] == "accepted"
    assert by_id["bad-1"]["status"] == "refused" and "distinct" in str(by_id["bad-1"]["error"])
