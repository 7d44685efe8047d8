"""Redis refusing (OOM, READONLY, NOREPLICAS, BUSY): a 503 naming it, counted, health degraded."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
import redis
from flask import Flask

from router import create_app
from router.server import metrics
from tests.conftest import OPERATOR, TOKENS, auth
from tests.servers import OwnRedis, free_port, wait_for

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}
#: A read-only script that keeps Redis busy for about 1.5 s (it answers BUSY meanwhile).
BUSY_LOOP = """
local t = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > 1500000 then return 1 end
end
"""


@contextmanager
def out_of_memory(admin: redis.Redis) -> Iterator[None]:
    """maxmemory 1 byte with noeviction: every write is refused with OOM."""
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    try:
        yield
    finally:
        admin.config_set("maxmemory", 0)


@contextmanager
def read_only(admin: redis.Redis) -> Iterator[None]:
    """The server made a replica of a master that does not exist: READONLY."""
    admin.replicaof("127.0.0.1", free_port())
    try:
        yield
    finally:
        admin.replicaof("NO", "ONE")


@contextmanager
def no_replicas(admin: redis.Redis) -> Iterator[None]:
    """min-replicas-to-write 1 with no replica: NOREPLICAS."""
    admin.config_set("min-replicas-to-write", 1)
    try:
        yield
    finally:
        admin.config_set("min-replicas-to-write", 0)


@contextmanager
def busy(admin: redis.Redis) -> Iterator[None]:
    """A long script running, past busy-reply-threshold: BUSY."""
    admin.config_set("busy-reply-threshold", 100)
    looper = redis.Redis(port=admin.connection_pool.connection_kwargs["port"], socket_timeout=10)
    thread = threading.Thread(target=lambda: looper.eval(BUSY_LOOP, 0), daemon=True)
    thread.start()

    def answers_busy() -> bool:
        try:
            admin.ping()
        except redis.exceptions.BusyLoadingError:
            return True
        except redis.exceptions.ResponseError as exc:
            return str(exc).startswith("BUSY")
        return False

    # Polled: the script is past the threshold once another client is answered BUSY.
    wait_for(answers_busy, 10, "the server to answer BUSY", interval=0.05)
    try:
        yield
    finally:
        thread.join(10)
        looper.close()


CONDITIONS: dict[str, Callable[[redis.Redis], AbstractContextManager[None]]] = {
    "OOM": out_of_memory, "READONLY": read_only, "NOREPLICAS": no_replicas, "BUSY": busy,
}


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    """A private redis-server this test may misconfigure."""
    server = OwnRedis(persist=False)
    server.start()
    yield server
    server.close()


@pytest.fixture
def router(own: OwnRedis) -> Iterator[Flask]:
    """The router on the private server, with a role on a canary."""
    # No hold: health is ok again the moment the condition ends (the hold is tested below).
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                      "health_hold_s": 0})
    r = app.test_client().put("/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR))
    assert r.status_code == 201
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _refusals(condition: str) -> float:
    value: float = metrics.REDIS_REFUSALS.labels(condition)._value.get()
    return value


@pytest.mark.parametrize("condition", sorted(CONDITIONS))
def test_redis_refusal_answers_503_naming_it_counts_it_and_degrades_health(
        condition: str, own: OwnRedis, router: Flask) -> None:
    """A write Redis refuses answers 503 naming the condition, nothing changes, health degrades."""
    client = router.test_client()
    admin = redis.Redis.from_url(own.url, socket_timeout=10)
    before = _refusals(condition)
    try:
        with CONDITIONS[condition](admin):
            r = client.post("/v1/bindings/summarizer/canary",
                            json={"share": 0.5, "reason": "more"}, headers=auth(OPERATOR))
            assert r.status_code == 503, r.json
            error = r.json["error"]
            assert error["code"] == "store_unavailable"
            assert error["details"]["condition"] == condition
            assert condition in error["message"] and "nothing was applied" in error["message"]
            health = client.get("/healthz", headers=auth(OPERATOR))
            assert health.status_code == 200
            assert health.json["status"] == "degraded"
            assert health.json["checks"]["redis"]["condition"] == condition
    finally:
        admin.close()
    assert _refusals(condition) == before + 1
    r = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR))
    assert r.json["version"] == 1 and r.json["binding"]["share"] == 0.1  # not applied
    assert client.get("/healthz").json["status"] == "ok"
    r = client.post("/v1/bindings/summarizer/canary", json={"share": 0.5, "reason": "more"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["version"] == 2


def test_health_stays_degraded_while_redis_refuses_some_writes(own: OwnRedis) -> None:
    """A write refused (OOM) keeps /healthz degraded for the hold even when the next probe
    gets through: a Redis at its memory limit takes some writes and refuses others."""
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    client = app.test_client()
    admin = redis.Redis.from_url(own.url, socket_timeout=10)
    try:
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        with out_of_memory(admin):
            r = client.post("/v1/bindings/summarizer/canary",
                            json={"share": 0.5, "reason": "more"}, headers=auth(OPERATOR))
            assert r.status_code == 503
        # The probe's write now succeeds; the refusal a moment ago still counts.
        health = client.get("/healthz", headers=auth(OPERATOR))
        assert health.json["status"] == "degraded"
        check = health.json["checks"]["redis"]
        assert check["condition"] == "OOM" and check["ok"] is False
        assert 0 <= check["refused_s_ago"] < 15
        with out_of_memory(admin):
            assert client.get("/healthz").json["status"] == "degraded"
        assert [client.get("/healthz").json["status"] for _ in range(20)] == ["degraded"] * 20
    finally:
        admin.close()
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
    held = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                       "health_hold_s": 0})
    try:
        assert held.test_client().get("/healthz").json["status"] == "ok"
    finally:
        held.extensions["rolegate"].cache.stop()
        held.extensions["rolegate"].redis.close()
