"""A POST is counted against its token's quota inside the ingest script, whatever its shape.

One round trip instead of two, for a single trace and for a batch of several
groups (a canary batch: one per arm) or several script calls (over 200 traces);
the counts, the 429 and what gets stored stay those of the separate quota
pipeline (which a Redis Cluster still uses): over the quota nothing of the
request is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from bindings.models import Invariants
from bindings.store import binding_key
from gatekeeper.checks.invariants import check
from gatekeeper.store.trace_ingest import Charge, Checked, Moved, OverQuota
from gatekeeper.store.traces import TraceStore
from rolegate.trace import Trace
from router import create_app
from router.server.quota import quota_key
from tests.conftest import OPERATOR, TOKENS, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
AGENT = "agent-secret"


def _trace(run_id: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "role": "role-a", "config": "cfg_a",
                            "arm": "current", "key": f"job-{run_id}", "tools": ["read"],
                            "stamps": STAMPS}
    body.update(fields)
    return body


def _app(redis_url: str, quota: str) -> Flask:
    return create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                       "tokens": f"{TOKENS},agent-a={AGENT}:caller", "ingest_quota": quota})


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """A router whose token agent-a may report 2 traces a second; role-a runs cfg_a."""
    built = _app(redis_url, "traces=2")
    r = built.test_client().put("/v1/bindings/role-a", headers=auth(OPERATOR),
                                json={"current": "cfg_a"})
    assert r.status_code == 201, r.json
    yield built
    built.extensions["rolegate"].cache.stop()
    built.extensions["rolegate"].redis.close()


def _post(client: FlaskClient, body: dict[str, Any]) -> Any:
    return client.post("/v1/traces", headers=auth(AGENT), json=body)


def _runs(conn: redis.Redis) -> list[bytes]:
    return sorted(conn.keys("rolegate:{role-a}:claims:*"))


def test_the_third_single_trace_in_a_second_is_429_and_not_stored(
        app: Flask, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the traces quota a single trace is refused with Retry-After and never written."""
    monkeypatch.setattr("router.api.traces.time.time", lambda: 1_000_000.25)
    client = app.test_client()
    assert _post(client, _trace("r1")).status_code == 200
    assert _post(client, _trace("r2")).status_code == 200
    r = _post(client, _trace("r3"))
    assert r.status_code == 429 and r.json["error"]["code"] == "quota_exceeded"
    assert r.json["error"]["details"] == {"limit": 2, "used": 3, "what": "traces",
                                          "retry_after_s": 1}
    assert r.headers["Retry-After"] == "1"
    assert _runs(redis_conn) == [b"rolegate:{role-a}:claims:r1", b"rolegate:{role-a}:claims:r2"]
    assert int(redis_conn.get(quota_key("agent-a", "traces", 1_000_000))) == 3


def test_a_retried_trace_is_counted_once_per_request(
        app: Flask, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A duplicate takes the script twice (its run id was known) but its request counts once."""
    monkeypatch.setattr("router.api.traces.time.time", lambda: 1_000_001.5)
    client = app.test_client()
    assert _post(client, _trace("r1")).json["accepted"] == 1
    again = _post(client, _trace("r1"))
    assert again.status_code == 200 and again.json["duplicates"] == 1
    assert int(redis_conn.get(quota_key("agent-a", "traces", 1_000_001))) == 2
    assert _post(client, _trace("r2")).status_code == 429


def test_a_refused_single_trace_still_counts(
        app: Flask, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace refused before the store (config not bound) is counted by the quota pipeline."""
    monkeypatch.setattr("router.api.traces.time.time", lambda: 1_000_002.5)
    client = app.test_client()
    r = _post(client, _trace("r1", config="cfg_z"))
    assert r.status_code == 422 and r.json["error"]["code"] == "config_not_bound"
    assert int(redis_conn.get(quota_key("agent-a", "traces", 1_000_002))) == 1
    assert int(redis_conn.get(quota_key("agent-a", "bytes", 1_000_002))) > 0
    assert _post(client, _trace("r2")).status_code == 200
    assert _post(client, _trace("r3")).status_code == 429


def _checked(run_id: str, version: int | None = None) -> Checked:
    t = Trace.model_validate(_trace(run_id, time=1.0))
    return Checked(t, check(t, Invariants()), "100.000000", version)


def _charge(second: int, traces_limit: int = 1, bytes_limit: int = 0) -> Charge:
    return Charge(quota_key("t", "traces", second), quota_key("t", "bytes", second),
                  1, 500, traces_limit, bytes_limit, 5)


def test_the_store_counts_a_charge_once_even_when_the_binding_moved(
        redis_conn: redis.Redis) -> None:
    """A group answered Moved was charged; sent again it leaves the charge out."""
    store = TraceStore(redis_conn)
    redis_conn.hset(binding_key("role-a"), "version", 3)
    (outcome,) = store.add([_checked("m1", version=2)], _charge(7))
    assert outcome == Moved("m1", 3)
    assert int(redis_conn.get(quota_key("t", "traces", 7))) == 1
    (outcome,) = store.add([_checked("m1", version=3)])
    assert not isinstance(outcome, Moved)
    assert int(redis_conn.get(quota_key("t", "traces", 7))) == 1
    assert 0 < redis_conn.ttl(quota_key("t", "bytes", 7)) <= 5


def test_the_store_refuses_a_charge_over_the_bytes_limit_and_writes_nothing(
        redis_conn: redis.Redis) -> None:
    """OverQuota names what went over; the trace, its run id and its window stay unwritten."""
    store = TraceStore(redis_conn)
    with pytest.raises(OverQuota) as raised:
        store.add([_checked("b1")], _charge(8, traces_limit=0, bytes_limit=400))
    assert (raised.value.what, raised.value.used, raised.value.limit) == ("bytes", 500, 400)
    assert _runs(redis_conn) == []
    assert store.length("role-a", "cfg_a", "current") == 0


def _many(prefix: str, n: int, arm: str = "current") -> list[Checked]:
    config = "cfg_a" if arm == "current" else "cfg_b"
    traces = [Trace.model_validate(_trace(f"{prefix}{i}", time=1.0, arm=arm, config=config))
              for i in range(n)]
    return [Checked(t, check(t, Invariants()), "100.000000") for t in traces]


def test_a_request_of_several_script_calls_over_the_quota_stores_nothing_in_any(
        redis_conn: redis.Redis) -> None:
    """Two groups, one of them over 200 traces (three calls): the first call refuses the
    charge and marks it, and the later calls store nothing either."""
    store = TraceStore(redis_conn)
    items = _many("c", 250) + _many("k", 3, arm="candidate")
    charge = Charge(quota_key("t", "traces", 10), quota_key("t", "bytes", 10),
                    len(items), 5000, 100, 0, 5)
    with pytest.raises(OverQuota) as raised:
        store.add(items, charge)
    assert (raised.value.what, raised.value.used, raised.value.limit) == ("traces", 253, 100)
    assert _runs(redis_conn) == []
    assert store.length("role-a", "cfg_a", "current") == 0
    assert store.length("role-a", "cfg_b", "candidate") == 0
    (marker,) = redis_conn.keys(quota_key("t", "traces", 10) + ":refused:*")
    assert redis_conn.get(marker) == b"traces 253" and 0 < redis_conn.ttl(marker) <= 5


def test_a_request_of_several_script_calls_within_the_quota_counts_once(
        redis_conn: redis.Redis) -> None:
    """Within the limits every call stores, and the charge counts once (no marker left)."""
    store = TraceStore(redis_conn)
    items = _many("w", 230) + _many("v", 2, arm="candidate")
    charge = Charge(quota_key("t", "traces", 11), quota_key("t", "bytes", 11),
                    len(items), 5000, 1000, 0, 5)
    outcomes = store.add(items, charge)
    assert len(outcomes) == 232 and not any(isinstance(o, Moved) for o in outcomes)
    assert int(redis_conn.get(quota_key("t", "traces", 11))) == 232
    assert int(redis_conn.get(quota_key("t", "bytes", 11))) == 5000
    assert redis_conn.keys(quota_key("t", "traces", 11) + ":refused:*") == []
    assert store.length("role-a", "cfg_a", "current") == 230


@pytest.fixture
def canary_app(redis_url: str) -> Iterator[Flask]:
    """agent-a may report 3 traces a second; role-a runs a canary of cfg_b on cfg_a."""
    built = _app(redis_url, "traces=3")
    client = built.test_client()
    r = client.put("/v1/bindings/role-a", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.5})
    assert r.status_code == 201, r.json
    yield built
    built.extensions["rolegate"].cache.stop()
    built.extensions["rolegate"].redis.close()


def test_a_canary_batch_is_charged_in_its_store_round_trip(
        canary_app: Flask, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of both arms (two groups) is counted by the ingest script, not a pipeline of
    its own; the next one, over the quota, is a 429 with none of its traces stored."""
    monkeypatch.setattr("router.api.traces.time.time", lambda: 1_000_003.5)

    def no_pipeline(*args: Any) -> None:
        raise AssertionError("charged by a round trip of its own")

    monkeypatch.setattr("router.api.traces.charge_quota", no_pipeline)
    client = canary_app.test_client()
    both = [_trace("a1"), _trace("b1", arm="candidate", config="cfg_b")]
    r = client.post("/v1/traces", headers=auth(AGENT), json={"traces": both})
    assert r.status_code == 200 and r.json["accepted"] == 2, r.json
    assert int(redis_conn.get(quota_key("agent-a", "traces", 1_000_003))) == 2
    again = [_trace("a2"), _trace("b2", arm="candidate", config="cfg_b")]
    r = client.post("/v1/traces", headers=auth(AGENT), json={"traces": again})
    assert r.status_code == 429 and r.json["error"]["details"]["used"] == 4, r.json
    assert _runs(redis_conn) == [b"rolegate:{role-a}:claims:a1", b"rolegate:{role-a}:claims:b1"]
