"""The single-trace ingest fast path in front of Flask answers exactly as the Flask view does."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.store.traces import TraceStore
from router import create_app
from router.api.ingest_fast import IngestFastPath
from router.api.resolve_fast import ResolveFastPath
from router.server import logs, metrics
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.test_resolve_fast import CountingInner

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
SCOPED = "scoped-secret"
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
          "gate": {"invariants": {"forbidden_tools": ["web_write"]}}}
JSON = {"Content-Type": "application/json"}


def _trace(run_id: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "role": "summarizer", "config": "cfg_a",
                            "arm": "current", "key": f"job-{run_id}", "tools": ["read"],
                            "cost_usd": 0.01, "stamps": STAMPS}
    body.update(fields)
    return body


def _otlp() -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}


#: (name, body or a function of the run id, headers, answered in front of Flask?)
CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    ("plain", _trace, auth(CALLER), True),
    ("request id", _trace, {**auth(CALLER), "X-Request-Id": "req-7"}, True),
    ("bad request id", _trace, {**auth(CALLER), "X-Request-Id": 'bad" id'}, True),
    ("candidate", lambda r: _trace(r, config="cfg_b", arm="candidate"), auth(CALLER), True),
    ("time given", lambda r: _trace(r, time=1_700_000_000.0), auth(OPERATOR), True),
    ("retry", lambda r: _trace("retried"), auth(CALLER), True),
    ("batch", lambda r: {"traces": [_trace(r)]}, auth(CALLER), True),
    ("list", lambda r: [_trace(r)], auth(CALLER), True),
    ("otlp json", lambda r: _otlp(), auth(CALLER), False),
    ("invalid", lambda r: _trace(r, tokens=-1), auth(CALLER), False),
    ("no token", _trace, {}, False),
    ("unknown token", _trace, auth("nobody"), False),
    ("reviewer scope", _trace, auth("reviewer-secret"), False),
    ("other role's token", _trace, auth(SCOPED), False),
    ("unknown role", lambda r: _trace(r, role="nosuchrole"), auth(CALLER), False),
    ("config not bound", lambda r: _trace(r, config="cfg_z"), auth(CALLER), False),
    ("browser origin", _trace, {**auth(CALLER), "Origin": "http://evil.example"}, False),
    ("foreign host", _trace, {**auth(CALLER), "Host": "attacker.example"}, False),
]


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """The router with a token limited to role `other` besides the usual ones."""
    built = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                        "tokens": f"{TOKENS},scoped={SCOPED}:caller:other"})
    yield built
    built.extensions["rolegate"].cache.stop()
    built.extensions["rolegate"].redis.close()


def _layers(app: Flask) -> tuple[ResolveFastPath, IngestFastPath]:
    outer = app.wsgi_app
    assert isinstance(outer, ResolveFastPath) and isinstance(outer.inner, IngestFastPath)
    return outer, outer.inner


def _counters(role: str) -> float:
    return sum(metrics.TRACES.labels(role, arm)._value.get() for arm in ("current", "candidate")) \
        + metrics.REQUESTS.labels("2xx")._value.get()


def _post(client: FlaskClient, body: Any, headers: dict[str, str],
          lines: io.StringIO) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    logs.flush()
    lines.truncate(0)
    lines.seek(0)
    r = client.post("/v1/traces", data=json.dumps(body), headers={**JSON, **headers})
    logs.flush()
    logged = [json.loads(x) for x in lines.getvalue().splitlines() if x.strip()]
    volatile = {"ts", "duration_ms", "request_id"}
    answer = {"status": r.status_code, "body": r.get_json(silent=True),
              "headers": sorted(h.lower() for h, _ in r.headers),
              "content_type": r.headers.get("Content-Type"),
              "retry_after": r.headers.get("Retry-After"),
              "request_id": r.headers.get("X-Request-Id")}
    return answer, [{k: v for k, v in x.items() if k not in volatile} for x in logged]


def _same_shape(answer: dict[str, Any], headers: dict[str, str], run_id: str) -> dict[str, Any]:
    """The answer with what differs per request (run id, drawn request id) made comparable."""
    out = json.loads(json.dumps(answer).replace(run_id, "RUN"))
    if answer["request_id"] and headers.get("X-Request-Id") != answer["request_id"]:
        assert len(answer["request_id"]) == 32
        out["request_id"] = "drawn"
    return out


def test_fast_path_answers_like_the_flask_view(app: Flask, lines: io.StringIO,
                                               redis_conn: redis.Redis) -> None:
    """Status, body, headers, log lines, counters and what is stored match the Flask view."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    outer, fast = _layers(app)
    counting = CountingInner(fast.inner)
    fast.inner = counting
    store = TraceStore(redis_conn)
    # Stored once before: both paths answer its retry as a duplicate.
    assert client.post("/v1/traces", json=_trace("retried"),
                       headers=auth(CALLER)).json["accepted"] == 1
    for name, make, headers, in_front in CASES:
        answers, logged, counted, stored = [], [], [], []
        for via in ("fast", "flask"):
            run_id = f"{name.replace(' ', '-')}-{via}"
            body = make(run_id) if callable(make) else make
            outer.inner = fast if via == "fast" else counting  # Flask alone, or behind us
            before, calls = _counters("summarizer"), counting.calls
            answer, written = _post(client, body, headers, lines)
            handed_on = counting.calls - calls
            if via == "fast":
                assert handed_on == (0 if in_front else 1), name
            answers.append(_same_shape(answer, headers, run_id))
            logged.append(json.loads(json.dumps(written).replace(run_id, "RUN")))
            counted.append(_counters("summarizer") - before)
            if answer["status"] == 200 and isinstance(body, dict) and "run_id" in body:
                kept = store.lookup("summarizer", body["run_id"])
                stored.append(kept.trace.model_dump(exclude={"run_id", "key", "time"}))
        outer.inner = fast
        assert answers[0] == answers[1], name
        assert logged[0] == logged[1], name
        assert counted[0] == counted[1], name
        assert stored[:1] == stored[1:], name


def test_over_the_quota_the_fast_path_hands_on_a_429(redis_url: str,
                                                     redis_conn: redis.Redis) -> None:
    """The script went over the quota: the view answers 429 without counting it again."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": TOKENS, "ingest_quota": "traces=1"})
    client = app.test_client()
    try:
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        first = client.post("/v1/traces", json=_trace("q1"), headers=auth(CALLER))
        second = client.post("/v1/traces", json=_trace("q2"), headers=auth(CALLER))
        if second.status_code == 200:  # the two fell in two seconds: the third is refused
            second = client.post("/v1/traces", json=_trace("q3"), headers=auth(CALLER))
        assert first.status_code == 200
        assert second.status_code == 429 and second.json["error"]["code"] == "quota_exceeded"
        assert second.json["error"]["details"]["used"] == 2  # counted once, by the script
        assert int(second.headers["Retry-After"]) >= 1
        assert redis_conn.exists("rolegate:{summarizer}:claims:q2") == 0
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_a_binding_moved_under_the_fast_path_is_stored_in_its_new_stage(
        app: Flask, redis_conn: redis.Redis) -> None:
    """This worker's copy is behind Redis: the view re-reads the binding and stores it there."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    services = app.extensions["rolegate"]
    services.cache.stop()  # no refresh: the copy changes only as this test says
    stale, _ = services.cache.get("summarizer")
    assert stale is not None
    r = client.post("/v1/bindings/summarizer/promote", headers=auth(OPERATOR),
                    json={"reason": "test"})
    assert r.status_code == 200, r.json
    services.cache.bindings["summarizer"] = stale  # as another worker would still hold it
    r = client.post("/v1/traces", json=_trace("m1"), headers=auth(CALLER))
    assert r.status_code == 200 and r.json["accepted"] == 1
    counters = redis_conn.keys("rolegate:quota:{caller-*}:traces:*")
    assert sum(int(redis_conn.get(k)) for k in counters) == 1  # counted once, not per attempt
    where = TraceStore(redis_conn).location("summarizer", "m1")
    assert where.epoch == f"{r_stage_since(redis_conn):.6f}" != f"{stale.binding.stage_since:.6f}"


def r_stage_since(conn: redis.Redis) -> float:
    """The stage_since of summarizer's binding as Redis holds it."""
    from bindings.store import BindingStore

    return float(BindingStore(conn).get("summarizer").binding.stage_since or 0)


def test_a_breach_that_trips_the_wire_is_handed_to_the_view(app: Flask) -> None:
    """A candidate trace with a zero-tolerance breach: Flask stores it and rolls the role back."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    _, fast = _layers(app)
    counting = CountingInner(fast.inner)
    fast.inner = counting
    r = client.post("/v1/traces", headers=auth(CALLER), json=_trace(
        "t1", config="cfg_b", arm="candidate", tools=["web_write"]))
    assert counting.calls == 1
    assert r.status_code == 200 and r.json["tripwire"][0]["role"] == "summarizer"
    stage = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR)).json["binding"]["stage"]
    assert stage == r.json["tripwire"][0]["stage"] != "canary"
