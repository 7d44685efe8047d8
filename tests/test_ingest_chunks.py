"""A big trace batch is stored by several short scripts, each run id once, counted once."""

from __future__ import annotations

import redis
from flask.testing import FlaskClient

from gatekeeper.store.traces import MAX_TRACES_PER_SCRIPT
from tests.conftest import CALLER, OPERATOR, auth

BINDING = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}


def _trace(run_id: str) -> dict[str, object]:
    return {"run_id": run_id, "role": "summarizer", "config": "cfg_a", "arm": "current",
            "key": f"job-{run_id}", "tools": ["read_file"], "tool_errors": 0,
            "answered": True, "cost_usd": 0.01, "tokens": 100, "latency_s": 1.0,
            "stamps": {"agent_version": "1", "instruction_hash": "sha256:1", "model_id": "m",
                       "tool_schema_hash": "sha256:2"}}


def test_big_batch_runs_as_several_scripts_and_counts_each_trace_once(
        client: FlaskClient, redis_conn: redis.Redis) -> None:
    """2.5 chunks' worth of traces: three script calls, every trace stored, a retry adds none."""
    assert client.put("/v1/bindings/summarizer", json=BINDING,
                      headers=auth(OPERATOR)).status_code == 201
    n = MAX_TRACES_PER_SCRIPT * 5 // 2
    batch = {"traces": [_trace(f"r{i}") for i in range(n)]}
    warm = client.post("/v1/traces", json=_trace("warm-up"), headers=auth(CALLER))
    assert warm.status_code == 200  # the script is loaded on the server from here on
    before = redis_conn.info("commandstats")["cmdstat_evalsha"]["calls"]
    r = client.post("/v1/traces", json=batch, headers=auth(CALLER))
    assert r.status_code == 200, r.json
    assert r.json["accepted"] == n
    calls = redis_conn.info("commandstats")["cmdstat_evalsha"]["calls"] - before
    assert calls == 3
    again = client.post("/v1/traces", json=batch, headers=auth(CALLER))
    assert again.status_code == 200
    assert {x["status"] for x in again.json["results"]} == {"duplicate"}
    gate = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert gate["arms"]["current"]["n"] == n + 1
