"""GET /v1/resolve: the answer's shape, drawn keys, and serving through a Redis outage."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import OwnRedis, wait_for

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}
FIELDS = {"role", "config", "arm", "stage", "share", "shadow", "version", "key", "stale",
          "bucketing", "run_id"}


def test_resolve_answers_every_field(client: FlaskClient) -> None:
    """A resolve names role, config, arm, stage, share, shadow, version, key, stale and
    how the job was bucketed."""
    client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    r = client.get("/v1/resolve/summarizer?key=job-7", headers=auth(CALLER))
    assert r.status_code == 200 and set(r.json) == FIELDS
    assert r.json["key"] == "job-7" and r.json["version"] == 1 and r.json["stale"] is False
    assert r.json["config"] == {"current": "cfg_a", "candidate": "cfg_b"}[r.json["arm"]]
    again = client.get("/v1/resolve/summarizer?key=job-7", headers=auth(CALLER))
    assert again.json["arm"] == r.json["arm"]


def test_resolve_without_key_draws_one(client: FlaskClient) -> None:
    """Without ?key= the router draws a fresh key and returns it."""
    client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    keys = {client.get("/v1/resolve/summarizer", headers=auth(CALLER)).json["key"]
            for _ in range(5)}
    assert len(keys) == 5 and all(keys)


def test_resolve_needs_a_token(client: FlaskClient) -> None:
    """Resolve without a token is 401."""
    assert client.get("/v1/resolve/summarizer?key=k").status_code == 401


def test_oversized_key_is_400(client: FlaskClient) -> None:
    """A job key longer than the limit is refused with 400."""
    client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    r = client.get("/v1/resolve/summarizer?key=" + "k" * 501, headers=auth(CALLER))
    assert r.status_code == 400 and r.json["error"]["details"]["field"] == "key"


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A private redis-server this test may stop and restart (never the shared one)."""
    server = OwnRedis()
    server.start()
    yield server
    server.close()


@pytest.fixture
def outage_app(own_redis: OwnRedis) -> Iterator[Flask]:
    """The router on the private Redis, polling every 50 ms."""
    app = create_app({"redis_url": own_redis.url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _resolve(client: FlaskClient) -> dict[str, Any]:
    r = client.get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    answer: dict[str, Any] = r.json
    return answer


def test_resolves_stay_up_stale_while_redis_is_down(own_redis: OwnRedis, outage_app: Flask) -> None:
    """With Redis stopped resolves answer from the last copy marked stale; a later change shows."""
    client = outage_app.test_client()
    client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    assert _resolve(client)["stale"] is False
    own_redis.stop()
    answer = wait_for(lambda: (a := _resolve(client))["stale"] and a, 3, "a stale resolve")
    assert answer["config"] in ("cfg_a", "cfg_b") and answer["version"] == 1
    for _ in range(20):
        assert _resolve(client)["stale"] is True
    down = client.get("/healthz")
    # Without a token: down, and nothing about where Redis lives.
    assert down.status_code == 503 and down.json == {"status": "failing"}
    detailed = client.get("/healthz", headers=auth(CALLER))
    assert detailed.status_code == 503 and detailed.json["checks"]["redis"]["ok"] is False
    write = client.post("/v1/bindings/summarizer/rollback", json={"reason": "r"},
                        headers=auth(OPERATOR))
    assert write.status_code == 503 and write.json["error"]["code"] == "store_unavailable"

    own_redis.start()
    wait_for(lambda: not _resolve(client)["stale"], 3, "a fresh resolve after Redis returned")
    # A change made by someone else (another router) after Redis returned.
    other = create_app({"redis_url": own_redis.url, "tokens": TOKENS, "testing": True})
    r = other.test_client().post("/v1/bindings/summarizer/rollback", json={"reason": "bad"},
                                 headers=auth(OPERATOR))
    other.extensions["rolegate"].cache.stop()
    other.extensions["rolegate"].redis.close()
    assert r.status_code == 200
    answer = wait_for(lambda: (a := _resolve(client))["stage"] == "rolled_back" and a, 2,
                      "the rollback to reach the router")
    assert answer["config"] == "cfg_a" and answer["version"] == 2 and answer["stale"] is False
    assert client.get("/healthz").status_code == 200


def test_first_resolves_racing_into_a_fresh_worker_all_answer(redis_url: str) -> None:
    """Concurrent first requests to a fresh app wait for its first load instead of failing."""
    setup = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True})
    setup.test_client().put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    setup.extensions["rolegate"].redis.close()
    fresh = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True})
    barrier = threading.Barrier(8)
    statuses: list[int] = []

    def first_request() -> None:
        client = fresh.test_client()
        barrier.wait()
        statuses.append(client.get("/v1/resolve/summarizer?key=k",
                                   headers=auth(CALLER)).status_code)

    threads = [threading.Thread(target=first_request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh.extensions["rolegate"].cache.stop()
    fresh.extensions["rolegate"].redis.close()
    assert statuses == [200] * 8


def test_a_corrupt_record_leaves_resolves_stale_and_is_picked_up_once_repaired(
        client: FlaskClient, redis_conn: Any) -> None:
    """An unreadable stored record: resolves stay up marked stale, reads are a JSON 500."""
    client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    assert _resolve(client)["stale"] is False
    key = "rolegate:{summarizer}:binding"
    good = redis_conn.hget(key, "record")
    redis_conn.hset(key, "record", b'{"not": "a record"}')
    redis_conn.incr("rolegate:generation")
    wait_for(lambda: _resolve(client)["stale"], 3, "a stale resolve")
    r = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR))
    assert r.status_code == 500 and r.json["error"]["code"] == "corrupt_record"
    redis_conn.hset(key, "record", good)
    redis_conn.incr("rolegate:generation")
    wait_for(lambda: not _resolve(client)["stale"], 3, "a fresh resolve after the repair")
