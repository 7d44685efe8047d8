"""JSON request and decision logs: one line each, a request id, never a token."""

from __future__ import annotations

import io
import json

from flask.testing import FlaskClient

from router.server.logs import flush
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, TOKENS, auth


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    flush()  # resolve lines are written in batches by a background thread
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def _create(client: FlaskClient, role: str = "summarizer") -> None:
    r = client.put(f"/v1/bindings/{role}", json={"current": "cfg_a", "candidate": "cfg_b"},
                   headers=auth(OPERATOR))
    assert r.status_code == 201, r.json


def test_one_json_line_per_request_with_echoed_request_id(
        client: FlaskClient, lines: io.StringIO) -> None:
    """Each request logs one JSON line carrying the caller's X-Request-Id, echoed back."""
    r = client.get("/healthz", headers={"X-Request-Id": "job-42.a"})
    assert r.headers["X-Request-Id"] == "job-42.a"
    requests = [x for x in _records(lines) if x["type"] == "request"]
    assert len(requests) == 1
    line = requests[0]
    assert line["request_id"] == "job-42.a"
    assert line["method"] == "GET" and line["path"] == "/healthz"
    assert line["status"] in (200, 503)
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0


def test_unsafe_request_id_is_replaced(client: FlaskClient, lines: io.StringIO) -> None:
    """A request id that could forge a log line is replaced by a generated one."""
    r = client.get("/healthz", headers={"X-Request-Id": 'x" injected'})
    echoed = r.headers["X-Request-Id"]
    assert echoed != 'x" injected' and len(echoed) == 32
    assert _records(lines)[-1]["request_id"] == echoed


def test_resolve_and_rollback_log_decisions(client: FlaskClient, lines: io.StringIO) -> None:
    """A resolve and a rollback each log a decision line tied to their request id."""
    _create(client)
    r = client.post("/v1/bindings/summarizer/canary", json={"share": 0.5, "reason": "try"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200
    r = client.get("/v1/resolve/summarizer?key=k1", headers={**auth(CALLER),
                                                             "X-Request-Id": "res-1"})
    arm = r.json["arm"]
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "p95 steps up"},
                    headers={**auth(GATEKEEPER), "X-Request-Id": "rb-1"})
    assert r.status_code == 200
    decisions = [x for x in _records(lines) if x["type"] == "decision"]
    by_id = {x["request_id"]: x for x in decisions}
    assert by_id["res-1"]["decision"] == "resolve"
    assert by_id["res-1"]["arm"] == arm and by_id["res-1"]["key"] == "k1"
    rollback = by_id["rb-1"]
    assert rollback["decision"] == "rollback" and rollback["actor"] == "gatekeeper"
    assert rollback["stage"] == "rolled_back" and rollback["share"] == 0.0
    assert rollback["reason"] == "p95 steps up"


def test_no_token_ever_reaches_the_log(client: FlaskClient, lines: io.StringIO) -> None:
    """Neither good nor bad bearer tokens appear anywhere in the log output."""
    _create(client)
    client.get("/v1/resolve/summarizer", headers=auth(CALLER))
    client.get("/v1/bindings/summarizer", headers=auth("not-a-real-token-XYZ"))
    client.post("/v1/bindings/summarizer/pause", json={"reason": "look"},
                headers=auth(OPERATOR))
    client.get(f"/v1/bindings?token={OPERATOR}", headers=auth(GATEKEEPER))
    text = lines.getvalue()
    assert len(_records(lines)) >= 5
    for secret in (OPERATOR, GATEKEEPER, CALLER, "not-a-real-token-XYZ"):
        assert secret not in text


def test_tripwire_rollback_logs_a_decision(client: FlaskClient, lines: io.StringIO) -> None:
    """A trace that trips the wire logs a rollback decision by the tripwire."""
    r = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR), json={
        "current": "cfg_a", "candidate": "cfg_b",
        "gate": {"invariants": {"forbidden_tools": ["rm_rf"]}}})
    assert r.status_code == 201
    client.post("/v1/bindings/summarizer/canary", json={"share": 0.5, "reason": "go"},
                headers=auth(OPERATOR))
    stamps = {"agent_version": "1", "instruction_hash": "i", "model_id": "m",
              "tool_schema_hash": "t"}
    r = client.post("/v1/traces", headers={**auth(CALLER), "X-Request-Id": "trip-1"}, json={
        "run_id": "bad-1", "role": "summarizer", "config": "cfg_b", "arm": "candidate",
        "key": "k", "tools": ["rm_rf"], "stamps": stamps})
    assert r.json["tripwire"], r.json
    (trip,) = [x for x in _records(lines)
               if x["type"] == "decision" and x.get("request_id") == "trip-1"]
    assert trip["decision"] == "rollback" and trip["actor"] == "tripwire"
    assert trip["role"] == "summarizer" and trip["run_id"] == "bad-1"
    assert trip["tools"] == ["rm_rf"]


def test_resolve_lines_can_be_switched_off(redis_url: str, lines: io.StringIO) -> None:
    """With log_resolves off (ROLEGATE_LOG_RESOLVES=0) resolves log nothing; writes still do."""
    from router import create_app

    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "log_resolves": False})
    try:
        client = app.test_client()
        _create(client)
        r = client.get("/v1/resolve/summarizer?key=a", headers=auth(CALLER))
        assert r.status_code == 200 and r.headers["X-Request-Id"]
        paths = [x.get("path") for x in _records(lines) if x["type"] == "request"]
        assert paths == ["/v1/bindings/summarizer"]
        assert not [x for x in _records(lines) if x.get("decision") == "resolve"]
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
