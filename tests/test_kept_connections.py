"""The trace store's kept connections: reused while clean, replaced when dropped, breaker first."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from gatekeeper.store.kept import KeptConnections, ready
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import hung, router_on_own_redis, wait_for

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def _trace(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "role": "summarizer", "config": "cfg_a", "arm": "current",
            "key": f"job-{run_id}", "tools": ["read"], "stamps": STAMPS}


def test_a_clean_connection_is_reused_and_a_dropped_one_replaced(redis_url: str) -> None:
    """One connection serves call after call; killed by the server, the next call reconnects."""
    client = redis.Redis.from_url(redis_url)
    kept = KeptConnections(client.connection_pool)
    assert kept.call("PING") in (b"PONG", "PONG")
    (conn,) = kept._idle
    assert ready(conn)
    assert kept.call("SET", "kept:a", "1") in (True, b"OK", "OK")
    assert kept._idle == [conn]  # the same one, taken and given back
    with pytest.raises(redis.ResponseError):
        kept.call("NOSUCHCOMMAND")  # an error reply, read whole: still clean, kept
    assert kept._idle == [conn]
    dropped = conn._sock
    other = redis.Redis.from_url(redis_url)
    other.client_kill_filter(_type="normal", skipme=True)  # drops `conn` on the server side
    wait_for(lambda: not ready(conn) or None, 5, "the server to close the connection")
    assert kept.call("GET", "kept:a") == b"1"  # on a fresh connection
    assert len(kept._idle) == 1 and kept._idle[0]._sock is not dropped  # reconnected
    other.close()
    client.close()


def test_ingest_fails_fast_while_redis_is_hung_and_recovers() -> None:
    """The breaker runs before a kept connection is used: after one timeout, 503 at once."""
    with router_on_own_redis(TOKENS) as (own, client):
        assert client.put("/v1/bindings/summarizer", json={"current": "cfg_a"},
                          headers=auth(OPERATOR)).status_code == 201
        assert client.post("/v1/traces", json=_trace("h0"),
                           headers=auth(CALLER)).status_code == 200  # a kept connection now
        with hung(own):
            first = client.post("/v1/traces", json=_trace("h1"), headers=auth(CALLER))
            assert first.status_code in (503, 504)  # waited out the socket timeout
            for n in range(3):
                started = time.monotonic()
                again = client.post("/v1/traces", json=_trace(f"h{n + 2}"),
                                    headers=auth(CALLER))
                assert again.status_code == 503, again.json
                assert "circuit open" in again.json["error"]["message"]
                assert time.monotonic() - started < 0.5
        wait_for(lambda: client.post("/v1/traces", json=_trace("h9"),
                                     headers=auth(CALLER)).status_code == 200 or None,
                 10, "ingest to work again once Redis answers")


def test_the_breaker_hook_runs_once_per_call_kept_or_new(redis_url: str) -> None:
    """A new connection runs the pool's hook, a kept one runs `before`: never both (a breaker's
    probe spent twice would leave it open for good)."""
    client = redis.Redis.from_url(redis_url)
    pool = client.connection_pool
    runs: list[str] = []
    original = pool.get_connection

    def hooked(*args: Any, **kwargs: Any) -> Any:
        runs.append("hook")
        return original(*args, **kwargs)

    pool.get_connection = hooked  # type: ignore[method-assign]  # as breaker.install does
    kept = KeptConnections(pool, lambda: runs.append("hook"))
    for _ in range(3):
        kept.call("PING")
    assert runs == ["hook"] * 3
    client.close()
