"""POST /v1/traces, the tripwire, and the gate and tools endpoints, against the real Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.checks.invariants import check
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import Checked
from rolegate.trace import Trace
from router import create_app
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, TOKENS, auth
from tests.servers import wait_for

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
GATE = {"thresholds": {"min_samples": 5, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["web_write"], "max_steps": 4}}


def trace(run_id: str, arm: str = "current", **fields: Any) -> dict[str, Any]:
    """A trace body for role summarizer (config by arm), passing unless `fields` say not."""
    body: dict[str, Any] = {"run_id": run_id, "role": "summarizer", "arm": arm,
                            "config": "cfg_a" if arm == "current" else "cfg_b",
                            "key": f"job-{run_id}", "tools": ["read", "write"],
                            "cost_usd": 0.01, "stamps": STAMPS}
    body.update(fields)
    return body


def make_role(client: FlaskClient, share: float | None = None) -> None:
    """Create summarizer (cfg_a, candidate cfg_b); put it on a canary when `share` is set."""
    r = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE})
    assert r.status_code == 201, r.json
    if share is not None:
        r = client.post("/v1/bindings/summarizer/canary", headers=auth(OPERATOR),
                        json={"share": share, "reason": "start canary"})
        assert r.status_code == 200, r.json


def post(client: FlaskClient, body: Any, token: str = CALLER) -> Any:
    """POST /v1/traces and return the response."""
    return client.post("/v1/traces", json=body, headers=auth(token))


def test_single_trace_accepted_with_verdict(client: FlaskClient) -> None:
    """One trace is accepted with its verdict, and `time` is filled in."""
    make_role(client)
    before = time.time()
    r = post(client, trace("r1"))
    assert r.status_code == 200, r.json
    assert r.json["accepted"] == 1 and r.json["tripwire"] == []
    (result,) = r.json["results"]
    assert result["status"] == "accepted" and result["verdict"]["passed"] is True
    assert result["verdict"]["criteria"] == {"answered": True, "forbidden_tools": True,
                                             "max_steps": True}
    stored = client.application.extensions["rolegate.traces"].lookup("summarizer", "r1")
    assert stored.trace.time is not None and stored.trace.time >= before


def test_every_scope_may_post(client: FlaskClient) -> None:
    """Caller, gatekeeper and operator tokens may all report traces; no token may not."""
    make_role(client)
    for i, token in enumerate((CALLER, GATEKEEPER, OPERATOR)):
        assert post(client, trace(f"r{i}"), token).status_code == 200
    assert client.post("/v1/traces", json=trace("x")).status_code == 401


def test_batch_with_some_bad_traces(client: FlaskClient) -> None:
    """Bad traces are refused with index and reason; the good ones in the batch are kept."""
    make_role(client)
    batch = [
        trace("ok1"),
        trace("bad-arm", arm="sideways"),
        {"run_id": "no-stamps", "role": "summarizer", "config": "cfg_a", "arm": "current"},
        "not an object",
        trace("contradicts", steps=[{"tool": "read"}], tools=["read", "write"]),
        trace("ghost-role", role="nobody"),
        trace("ok2", tools=["read"] * 9),
    ]
    r = post(client, {"traces": batch})
    assert r.status_code == 207, r.json
    assert (r.json["accepted"], r.json["refused"]) == (2, 5)
    status = [(x["index"], x["status"]) for x in r.json["results"]]
    assert status == [(0, "accepted"), (1, "refused"), (2, "refused"), (3, "refused"),
                      (4, "refused"), (5, "refused"), (6, "accepted")]
    results = r.json["results"]
    assert results[1]["run_id"] == "bad-arm" and "arm" in results[1]["error"]["message"]
    assert "stamps" in results[2]["error"]["message"]
    assert "contradicts" in results[4]["error"]["message"]
    assert results[5]["error"]["code"] == "not_found"
    assert results[6]["verdict"]["passed"] is False
    assert results[6]["verdict"]["failed"] == ["max_steps"]
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["current"]["n"] == 2


def test_all_refused_is_422_error(client: FlaskClient) -> None:
    """When every trace is refused the answer is 422 in the error shape, with the results."""
    make_role(client)
    r = post(client, {"traces": [trace("a", arm="x"), trace("b", cost_usd=-1)]})
    assert r.status_code == 422
    assert r.json["error"]["code"] == "invalid"
    assert [d["index"] for d in r.json["error"]["details"]["refused"]] == [0, 1]
    assert len(r.json["results"]) == 2


@pytest.mark.parametrize("body", [[], {"traces": []}, {"traces": {}},
                                  {"traces": [], "extra": 1}, 7])
def test_malformed_bodies_are_400(client: FlaskClient, body: Any) -> None:
    """A body that is neither a trace nor a batch of traces is a 400 with the error shape."""
    r = post(client, body)
    assert r.status_code == 400 and r.json["error"]["code"] == "bad_request"


def test_not_json_is_400(client: FlaskClient) -> None:
    """A body that is not JSON is a 400."""
    r = client.post("/v1/traces", data="{", headers=auth(CALLER),
                    content_type="application/json")
    assert r.status_code == 400


def test_retry_counts_once(client: FlaskClient) -> None:
    """Posting the same run_id again answers duplicate and the gate counts it once."""
    make_role(client)
    assert post(client, {"traces": [trace("r1"), trace("r2")]}).json["accepted"] == 2
    r = post(client, {"traces": [trace("r1"), trace("r2"), trace("r3")]})
    assert r.status_code == 200
    assert [x["status"] for x in r.json["results"]] == ["duplicate", "duplicate", "accepted"]
    assert (r.json["accepted"], r.json["duplicates"]) == (1, 2)
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["current"]["n"] == 3


def resolve_arms(client: FlaskClient, keys: range) -> set[str]:
    """The arms `client` resolves summarizer to for job keys `keys`."""
    arms = set()
    for k in keys:
        r = client.get(f"/v1/resolve/summarizer?key=k{k}", headers=auth(CALLER))
        assert r.status_code == 200, r.json
        arms.add(r.json["arm"])
    return arms


@pytest.fixture
def second_worker(redis_url: str) -> Iterator[Flask]:
    """Another router on the same Redis: a second worker with its own binding copy."""
    other = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                        "refresh_interval_s": 0.05})
    yield other
    other.extensions["rolegate"].cache.stop()


def test_tripwire_zeroes_the_canary(client: FlaskClient, second_worker: Flask) -> None:
    """One forbidden call in a 10% canary zeroes it in the same request, for every worker."""
    make_role(client, share=0.1)
    other = second_worker.test_client()
    assert resolve_arms(other, range(300)) == {"current", "candidate"}
    batch = [trace(f"c{i}") for i in range(5)]
    batch.append(trace("bad-run", arm="candidate", tools=["read", "web_write"]))
    r = post(client, {"traces": batch})
    assert r.status_code == 200, r.json
    (trip,) = r.json["tripwire"]
    assert trip["run_id"] == "bad-run" and trip["tools"] == ["web_write"]
    assert trip["stage"] == "rolled_back"
    assert r.json["results"][-1]["verdict"]["blocking"] is True
    # This worker answers from the rolled-back binding at once.
    assert resolve_arms(client, range(300)) == {"current"}
    binding = client.get("/v1/bindings/summarizer", headers=auth(CALLER)).json["binding"]
    assert (binding["stage"], binding["share"]) == ("rolled_back", 0.0)
    entry = client.get("/v1/bindings/summarizer/history", headers=auth(CALLER)).json["entries"][0]
    assert entry["actor"] == "tripwire" and entry["action"] == "rollback"
    assert entry["details"]["run_id"] == "bad-run" and entry["details"]["tool"] == "web_write"
    # The other worker follows within its refresh interval (well under a second).
    deadline = time.monotonic() + 1.0
    while resolve_arms(other, range(50)) != {"current"}:
        assert time.monotonic() < deadline, "second worker still routes to the candidate"
        time.sleep(0.02)
    assert resolve_arms(other, range(300)) == {"current"}


def test_tripwire_on_shadow_and_required_tool_lost(client: FlaskClient) -> None:
    """A shadow run that loses a required tool rolls the shadow stage back."""
    gate = {"invariants": {"required_tools": ["verifyIdentity"]}}
    client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
               json={"current": "cfg_a", "candidate": "cfg_b", "stage": "shadow", "gate": gate})
    r = post(client, trace("s1", arm="shadow", tools=["refund"]))
    (trip,) = r.json["tripwire"]
    assert trip["required_lost"] == ["verifyIdentity"] and trip["stage"] == "rolled_back"
    entry = client.get("/v1/bindings/summarizer/history", headers=auth(CALLER)).json["entries"][0]
    assert entry["details"]["required_lost"] == ["verifyIdentity"]


def test_tripwire_ignores_current_arm_and_stable_roles(client: FlaskClient) -> None:
    """A breach on the current arm, or with no live candidate, changes no binding."""
    make_role(client, share=0.1)
    r = post(client, trace("cur", tools=["web_write"]))
    assert r.json["tripwire"] == [] and r.json["results"][0]["verdict"]["blocking"]
    client.post("/v1/bindings/summarizer/rollback", headers=auth(OPERATOR),
                json={"reason": "manual"})
    r = post(client, trace("late", arm="candidate", tools=["web_write"]))
    assert r.json["tripwire"] == []
    history = client.get("/v1/bindings/summarizer/history", headers=auth(CALLER)).json
    assert [e["actor"] for e in history["entries"]] == ["alice", "alice", "alice"]


def test_retried_breach_trips_again_in_same_stage(client: FlaskClient) -> None:
    """A retry of a breaching run stored in this stage trips the wire (the first may have failed)."""
    make_role(client, share=0.1)
    store = client.application.extensions["rolegate.traces"]
    binding = client.application.extensions["rolegate"].store.get("summarizer").binding
    # Stored as the caller's own (run ids are known per reporter), as its first attempt was.
    caller = client.application.extensions["rolegate"].tokens.lookup(CALLER).name
    bad = Trace.model_validate(trace("b1", arm="candidate", tools=["web_write"],
                                     reporter=caller))
    store.add([Checked(bad, check(bad, binding.gate.invariants), epoch_of(binding))])
    r = post(client, trace("b1", arm="candidate", tools=["web_write"]))
    assert r.json["results"][0]["status"] == "duplicate"
    assert [t["run_id"] for t in r.json["tripwire"]] == ["b1"]


def test_gate_view_arms_and_comparison(client: FlaskClient) -> None:
    """The gate reports each arm's verdict with reasons and candidate vs current."""
    make_role(client, share=0.5)
    batch = [trace(f"a{i}") for i in range(10)]
    batch += [trace(f"b{i}", arm="candidate", tools=["read"] * (9 if i < 4 else 1))
              for i in range(10)]
    assert post(client, {"traces": batch}).status_code == 200
    r = client.get("/v1/roles/summarizer/gate", headers=auth(GATEKEEPER))
    assert r.status_code == 200, r.json
    view = r.json
    assert (view["stage"], view["share"]) == ("canary", 0.5)
    assert set(view["arms"]) == {"current", "candidate", "shadow"}
    current, candidate = view["arms"]["current"], view["arms"]["candidate"]
    assert current["verdict"] == "pass" and current["n"] == 10
    assert candidate["verdict"] == "fail" and candidate["pass_rate"] == 0.6
    assert [x["code"] for x in candidate["reasons"]] == ["pass_rate"]
    assert candidate["criteria"]["max_steps"] == {"passes": 6, "n": 10, "pass_rate": 0.6}
    assert candidate["tool_tally"] == {"read": 4 * 9 + 6}
    assert view["arms"]["shadow"]["verdict"] == "insufficient_data"
    cmp = view["comparison"]["candidate"]
    assert cmp["difference"] == pytest.approx(-0.4) and cmp["interval"][0] < -0.4
    assert view["comparison"]["shadow"]["difference"] is None


def test_gate_window_restarts_with_the_stage(client: FlaskClient) -> None:
    """The gate window is the current stage's: a stage change starts an empty window."""
    make_role(client, share=0.1)
    post(client, {"traces": [trace(f"c{i}", arm="candidate") for i in range(5)]})
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["candidate"]["verdict"] == "pass"
    client.post("/v1/bindings/summarizer/canary", headers=auth(OPERATOR),
                json={"share": 0.5, "reason": "next step"})
    # This worker's copy sees the new stage at its next refresh (every 0.05 s).
    wait_for(lambda: client.get("/v1/resolve/summarizer?key=k",
                                headers=auth(CALLER)).json["share"] == 0.5, 5,
             "the worker's copy to see the 0.5 step")
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["candidate"]["n"] == 0
    assert gate["arms"]["candidate"]["verdict"] == "insufficient_data"
    post(client, trace("later", arm="candidate"))
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["candidate"]["n"] == 1


def test_gate_unknown_role_is_404(client: FlaskClient) -> None:
    """The gate of a role with no binding is a 404 in the error shape."""
    r = client.get("/v1/roles/nobody/gate", headers=auth(CALLER))
    assert r.status_code == 404 and r.json["error"]["code"] == "not_found"
    assert client.get("/v1/roles/nobody/tools", headers=auth(CALLER)).status_code == 404


def test_tools_tally_per_config(client: FlaskClient) -> None:
    """The tools endpoint tallies every tool each config's runs called."""
    make_role(client, share=0.5)
    post(client, {"traces": [trace("a1", tools=["read", "read", "search"]),
                             trace("b1", arm="candidate", tools=["read", "web_write"])]})
    r = client.get("/v1/roles/summarizer/tools", headers=auth(CALLER))
    assert r.status_code == 200
    assert r.json["configs"] == {
        "cfg_a": {"runs": 1, "tools": {"read": 2, "search": 1}},
        "cfg_b": {"runs": 1, "tools": {"read": 1, "web_write": 1}},
    }


def test_bare_list_body_and_line_break_tool(client: FlaskClient) -> None:
    """A bare JSON list is a batch; a tool name with a line break is refused by index."""
    make_role(client)
    r = post(client, [trace("l1"), trace("l2")])
    assert r.status_code == 200 and r.json["accepted"] == 2
    r = post(client, [trace("l3"), trace("l4", tools=["read\nn\n9"])])
    assert r.status_code == 207
    assert r.json["results"][1]["error"]["details"]["errors"][0]["field"] == "tools.0"
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["current"]["n"] == 3


def test_single_trace_for_unknown_role_is_422_not_found(client: FlaskClient) -> None:
    """One trace for a role with no binding is refused: 422 whose error names not_found."""
    r = post(client, trace("x", role="nobody"))
    assert r.status_code == 422
    assert r.json["error"]["code"] == "not_found" and "nobody" in r.json["error"]["message"]


def test_retention_setting_reaches_the_store(redis_url: str) -> None:
    """trace_retention (ROLEGATE_TRACE_RETENTION) bounds the app's trace streams."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "trace_retention": 7})
    try:
        assert app.extensions["rolegate.traces"].retention == 7
    finally:
        app.extensions["rolegate"].cache.stop()


def test_stale_config_breach_does_not_hide_a_live_one(client: FlaskClient) -> None:
    """A breach by an old config in the same batch does not stop the live candidate's trip."""
    make_role(client, share=0.1)
    batch = [trace("old", arm="candidate", config="cfg_old", tools=["web_write"]),
             trace("live", arm="candidate", tools=["web_write"])]
    r = post(client, {"traces": batch})
    assert [t["run_id"] for t in r.json["tripwire"]] == ["live"]


def test_a_roles_trace_retention_caps_its_own_streams(client: FlaskClient, app: Flask) -> None:
    """A binding's trace_retention caps that role's streams; a role without it keeps the app's."""
    for role in ("summarizer", "triage"):
        binding = {"current": "cfg_a", "candidate": "cfg_b", "gate": GATE}
        if role == "summarizer":
            binding["trace_retention"] = 50
        r = client.put(f"/v1/bindings/{role}", headers=auth(OPERATOR), json=binding)
        assert r.status_code == 201, r.json
    assert client.get("/v1/bindings/summarizer",
                      headers=auth(OPERATOR)).json["binding"]["trace_retention"] == 50
    for batch in range(4):
        for role in ("summarizer", "triage"):
            body = {"traces": [trace(f"{role}-{batch}-{i}", role=role) for i in range(100)]}
            r = post(client, body)
            assert r.status_code == 200 and r.json["accepted"] == 100, r.json
    store = app.extensions["rolegate.traces"]
    # MAXLEN ~ trims whole stream nodes (100 entries by default), never below the cap.
    assert 50 <= store.length("summarizer", "cfg_a", "current") <= 150
    assert store.length("triage", "cfg_a", "current") == 400


@pytest.mark.parametrize("bad", [0, -3, "many", 10**30])
def test_a_bad_trace_retention_is_refused_naming_the_field(client: FlaskClient, bad: Any) -> None:
    """trace_retention must be a positive whole number: 4xx naming it, nothing written."""
    r = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "trace_retention": bad})
    assert 400 <= r.status_code < 500 and "trace_retention" in json.dumps(r.json), r.json
    assert client.get("/v1/bindings/summarizer", headers=auth(OPERATOR)).status_code == 404
