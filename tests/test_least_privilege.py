"""A caller token does only what it must: its roles, its name on its traces, its quota."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action
from gatekeeper.store.traces import TraceStore
from rolegate.http import ApiClient
from router import create_app
from router.server.tokens import file_line
from tests.conftest import GATEKEEPER, OPERATOR, TOKENS, auth
from tests.servers import werkzeug_server

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
SCOPED = "scoped-secret"
GATE = {"thresholds": {"min_samples": 5, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["web_write"]}}


def _trace(run_id: str, role: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "role": role, "config": "cfg_b",
                            "arm": "candidate", "key": f"job-{run_id}", "tools": ["read"],
                            "stamps": STAMPS}
    body.update(fields)
    return body


def _build(redis_url: str, **settings: Any) -> Flask:
    return create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                       **settings})


@pytest.fixture
def scoped(redis_url: str) -> Iterator[FlaskClient]:
    """A router where token `agent-a` may act on role-a only; role-a and role-b on a canary."""
    app = _build(redis_url, tokens=f"{TOKENS},agent-a={SCOPED}:caller:role-a")
    client = app.test_client()
    for role in ("role-a", "role-b"):
        r = client.put(f"/v1/bindings/{role}", headers=auth(OPERATOR),
                       json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                             "share": 0.5, "gate": GATE})
        assert r.status_code == 201, r.json
    yield client
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_a_token_scoped_to_role_a_cannot_touch_role_b(scoped: FlaskClient,
                                                      redis_conn: redis.Redis) -> None:
    """Resolve, read and report for role-b are 403 for a role-a token; nothing of role-b changes."""
    token = auth(SCOPED)
    assert scoped.get("/v1/resolve/role-a?key=k", headers=token).status_code == 200
    for path in ("/v1/resolve/role-b?key=k", "/v1/bindings/role-b",
                 "/v1/bindings/role-b/history", "/v1/roles/role-b/gate"):
        r = scoped.get(path, headers=token)
        assert r.status_code == 403 and r.json["error"]["details"]["role"] == "role-b", path
    assert set(scoped.get("/v1/bindings", headers=token).json["roles"]) == {"role-a"}
    # One forbidden call by role-b's "candidate" would trip its wire: refused, untouched.
    r = scoped.post("/v1/traces", headers=token,
                    json={"traces": [_trace("a1", "role-a"),
                                     _trace("b1", "role-b", tools=["web_write"])]})
    assert r.status_code == 207
    assert [x["status"] for x in r.json["results"]] == ["accepted", "refused"]
    assert r.json["results"][1]["error"]["code"] == "forbidden" and r.json["tripwire"] == []
    r = scoped.post("/v1/traces", headers=token, json=_trace("b2", "role-b"))
    assert r.status_code == 403 and r.json["error"]["code"] == "forbidden"
    assert redis_conn.keys("rolegate:{role-b}:traces:*") == []
    assert redis_conn.keys("rolegate:{role-b}:claims:*") == []
    b = scoped.get("/v1/bindings/role-b", headers=auth(OPERATOR)).json
    assert (b["version"], b["binding"]["stage"]) == (1, "canary")


def test_every_stored_trace_names_its_reporter(scoped: FlaskClient,
                                               redis_conn: redis.Redis) -> None:
    """The server stamps the reporting token's name on a trace, whatever the body claims."""
    r = scoped.post("/v1/traces", headers=auth(SCOPED),
                    json=_trace("r1", "role-a", reporter="gatekeeper"))
    assert r.status_code == 200, r.json
    stored = TraceStore(redis_conn).lookup("role-a", "r1").trace
    assert stored.reporter == "agent-a"


def test_ingest_beyond_the_quota_is_429_with_retry_after(redis_url: str,
                                                         redis_conn: redis.Redis) -> None:
    """Over a token's traces-per-second quota the request is 429, Retry-After set, nothing stored."""
    app = _build(redis_url, tokens=f"{TOKENS},agent-a={SCOPED}:caller",
                 ingest_quota="traces=3")
    client = app.test_client()
    client.put("/v1/bindings/role-a", headers=auth(OPERATOR), json={"current": "cfg_a"})
    batch = {"traces": [_trace(f"q{i}", "role-a", arm="current", config="cfg_a")
                        for i in range(4)]}
    r = client.post("/v1/traces", headers=auth(SCOPED), json=batch)
    assert r.status_code == 429 and r.json["error"]["code"] == "quota_exceeded"
    assert int(r.headers["Retry-After"]) >= 1
    assert redis_conn.keys("rolegate:{role-a}:claims:*") == []
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_a_bytes_quota_refuses_a_large_body(redis_url: str) -> None:
    """A body larger than the token's bytes-per-second allowance is 429, naming the limit."""
    app = _build(redis_url, tokens=f"{TOKENS},agent-a={SCOPED}:caller",
                 ingest_quota="traces=0,bytes=2000")
    client = app.test_client()
    client.put("/v1/bindings/role-a", headers=auth(OPERATOR), json={"current": "cfg_a"})
    big = _trace("big", "role-a", arm="current", config="cfg_a", output_text="x" * 3000)
    r = client.post("/v1/traces", headers=auth(SCOPED), json=big)
    assert r.status_code == 429 and "2000 bytes/s" in r.json["error"]["message"]
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_tokens_from_a_hashed_file_work_and_reload(redis_url: str, tmp_path: Path) -> None:
    """A token listed (hashed) in ROLEGATE_TOKENS_FILE is accepted; a line added later is too."""
    path = tmp_path / "tokens"
    path.write_text(file_line("bot", "file-token-1", "caller", ["role-a"]) + "\n")
    app = _build(redis_url, tokens_file=str(path))
    client = app.test_client()
    assert client.get("/v1/bindings", headers=auth("file-token-1")).status_code == 200
    assert client.get("/v1/bindings", headers=auth("file-token-2")).status_code == 401
    path.write_text(path.read_text() + file_line("ops", "file-token-2", "operator") + "\n")
    app.extensions["rolegate"].tokens.reload_if_changed(force=True)
    r = client.put("/v1/bindings/role-a", headers=auth("file-token-2"), json={"current": "c"})
    assert r.status_code == 201 and r.json["updated_by"] == "ops"
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


TRUSTED_GATE = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.8, "alpha": 0.05,
                               "min_stage_seconds": 0.0, "bake_seconds": 0.0},
                "invariants": {"forbidden_tools": ["web_write"]},
                "trusted_reporters": ["ci-eval"], "power": None}
FORGER = "forger-secret"
EVAL = "eval-secret"


@pytest.fixture
def trusted_app(redis_url: str) -> Iterator[Flask]:
    """Role `r` on a 50% canary whose gate trusts only reporter `ci-eval`; `forger` may report too."""
    app = _build(redis_url, tokens=f"{TOKENS},forger={FORGER}:caller:r,ci-eval={EVAL}:caller:r")
    client = app.test_client()
    r = client.put("/v1/bindings/r", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.5, "steps": [0.5, 1.0], "gate": TRUSTED_GATE})
    assert r.status_code == 201, r.json
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _both_arms(prefix: str, n: int, **fields: Any) -> dict[str, Any]:
    traces = []
    for i in range(n):
        traces.append(_trace(f"{prefix}-c{i}", "r", **fields))
        traces.append(_trace(f"{prefix}-a{i}", "r", arm="current", config="cfg_a"))
    return {"traces": traces}


def test_forged_evidence_from_an_untrusted_reporter_does_not_promote(trusted_app: Flask) -> None:
    """50 passing candidate runs + 50 current ones from an untrusted token: still no promotion."""
    client = trusted_app.test_client()
    r = client.post("/v1/traces", headers=auth(FORGER), json=_both_arms("f", 50))
    assert r.status_code == 200 and r.json["accepted"] == 100
    view = client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json
    candidate = view["arms"]["candidate"]
    assert candidate["n"] == 0 and candidate["verdict"] == "insufficient_data"
    assert candidate["by_reporter"] == {"forger": {"n": 50, "pass_rate": 1.0,
                                                  "forbidden_rate": 0.0, "clashes": 0,
                                                  "counted": False}}
    with werkzeug_server(trusted_app) as url:
        api = ApiClient(url, GATEKEEPER, attempts=2)
        try:
            [decision] = tick(api, time.time())
            assert decision.action is Action.HOLD, decision
            assert api.get("/v1/bindings/r")["binding"]["share"] == 0.5
            # The trusted reporter's own evidence does count, and promotes.
            r = client.post("/v1/traces", headers=auth(EVAL), json=_both_arms("e", 50))
            assert r.status_code == 200
            view = api.get("/v1/roles/r/gate")
            assert view["arms"]["candidate"]["n"] == 50
            assert view["arms"]["candidate"]["by_reporter"]["ci-eval"]["counted"] is True
            [decision] = tick(api, time.time())
            assert decision.action is Action.ADVANCE, decision
            assert api.get("/v1/bindings/r")["binding"]["share"] == 1.0
        finally:
            api.close()


def test_an_untrusted_reporters_forbidden_call_still_trips_the_wire(trusted_app: Flask) -> None:
    """Trust gates promotion only: one forbidden call from any in-scope reporter rolls back."""
    client = trusted_app.test_client()
    r = client.post("/v1/traces", headers=auth(FORGER),
                    json=_trace("bad", "r", tools=["web_write"]))
    assert r.status_code == 200 and r.json["tripwire"][0]["stage"] == "rolled_back"
    binding = client.get("/v1/bindings/r", headers=auth(OPERATOR)).json["binding"]
    assert binding["stage"] == "rolled_back"


def test_untrusted_shadow_pairs_are_not_counted(redis_url: str) -> None:
    """In shadow, runs of an untrusted reporter are read past: they pair nothing."""
    app = _build(redis_url, tokens=f"{TOKENS},forger={FORGER}:caller:r,ci-eval={EVAL}:caller:r")
    client = app.test_client()
    client.put("/v1/bindings/r", headers=auth(OPERATOR),
               json={"current": "cfg_a", "candidate": "cfg_b", "stage": "shadow",
                     "gate": TRUSTED_GATE})
    pairs = []
    for i in range(30):
        pairs.append(_trace(f"fc{i}", "r", arm="current", config="cfg_a", key=f"k{i}"))
        pairs.append(_trace(f"fs{i}", "r", arm="shadow", key=f"k{i}"))
    assert client.post("/v1/traces", headers=auth(FORGER),
                       json={"traces": pairs}).status_code == 200
    paired = client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json["paired"]
    assert paired["pairs"] == 0
    mine = [{**t, "run_id": "e" + t["run_id"]} for t in pairs[:20]]
    assert client.post("/v1/traces", headers=auth(EVAL),
                       json={"traces": mine}).status_code == 200
    assert client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json["paired"]["pairs"] == 10
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()
