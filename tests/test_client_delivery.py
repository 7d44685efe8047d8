"""Reporting never loses a trace quietly: encoding, body limits, refusals, 429, a dying sender."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask, Response, request

from gatekeeper.store.traces import TraceStore
from rolegate import Client
from rolegate.reporter import TraceReporter
from router import create_app
from tests.conftest import CALLER, TOKENS
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)

STAMPS = {"agent_version": "agent-1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def a_trace(run_id: str, role: str = "r", **fields: Any) -> dict[str, Any]:
    """A minimal valid trace of the current arm of config a."""
    return {"run_id": run_id, "role": role, "config": "a", "arm": "current",
            "tools": ["search"], "output_text": "done", "stamps": STAMPS, **fields}


def stored(redis_conn: redis.Redis, role: str = "r") -> list[str]:
    """Run ids stored for (role, a, current), in arrival order."""
    return [s.trace.run_id for s in TraceStore(redis_conn).read(role, "a", "current")]


class Opaque:
    """A tool result JSON has no form for."""

    def __repr__(self) -> str:
        return "Opaque(42)"


def test_an_unencodable_result_never_stops_later_traces(router: LiveRouter,
                                                        redis_conn: redis.Redis) -> None:
    """A result of the caller's own class is sent as its repr, counted, and later traces follow."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER, stamps=STAMPS) as client:
        with client.recorder(client.resolve("r", "k")) as run:
            run.tool("lookup", {"raw": b"\xff\x00"}, result=Opaque())
            run.output("ok")
        for n in range(20):
            client.report(a_trace(f"later-{n}"))
        assert client.flush(10)
        stats = client.report_stats()
    assert (stats.sent, stats.coerced, stats.sender_errors, stats.rejected) == (21, 1, 0, 0)
    trace = TraceStore(redis_conn).lookup("r", run.run_id).trace
    assert trace.steps is not None and trace.steps[0].result == "Opaque(42)"
    assert trace.steps[0].args == {"raw": "_wA="}  # bytes that are not UTF-8: URL-safe base64
    assert len(stored(redis_conn)) == 21


def test_the_sender_survives_an_unexpected_error(router: LiveRouter,
                                                 redis_conn: redis.Redis,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An error inside the sending loop is logged and counted; the next batch still goes out."""
    put_role(router, "r", current="a")
    original = TraceReporter._send
    calls = {"n": 0}

    def first_one_breaks(self: TraceReporter, batch: list[Any]) -> float | None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the sender")
        return original(self, batch)

    monkeypatch.setattr(TraceReporter, "_send", first_one_breaks)
    with Client(router.url, CALLER, batch_size=1) as client:
        client.report(a_trace("lost"))
        wait_for(lambda: client.report_stats().sender_errors == 1)
        client.report(a_trace("after"))
        assert client.flush(10)
        stats = client.report_stats()
    assert (stats.sender_errors, stats.unsent, stats.sent) == (1, 1, 1)
    assert stored(redis_conn) == ["after"]


@pytest.fixture
def small_router(redis_url: str) -> Iterator[LiveRouter]:
    """A live router whose body limit is 200 KB."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "max_body_bytes": 200 * 1024})
    live = LiveRouter(app)
    live.start()
    yield live
    live.stop()
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_400_traces_of_50kb_all_arrive_under_a_200kb_body_limit(
        small_router: LiveRouter, redis_conn: redis.Redis) -> None:
    """Batches over the body limit get 413, are split and resent: every trace is stored once."""
    put_role(small_router, "r", current="a")
    blob = "x" * (50 * 1024)
    sent = [f"big-{n}" for n in range(400)]
    with Client(small_router.url, CALLER, flush_timeout=60) as client:
        for run_id in sent:
            client.report(a_trace(run_id, output_text=blob))
        assert client.flush(120)
        stats = client.report_stats()
    assert (stats.sent, stats.rejected, stats.dropped, stats.unsent) == (400, 0, 0, 0)
    assert stats.splits >= 1
    assert sorted(stored(redis_conn)) == sorted(sent)


def test_a_trace_alone_over_the_limit_is_refused_on_its_own(
        small_router: LiveRouter, redis_conn: redis.Redis) -> None:
    """One trace bigger than the body limit is rejected as too_large; its neighbours arrive."""
    put_role(small_router, "r", current="a")
    with Client(small_router.url, CALLER) as client:
        client.report(a_trace("small-1"))
        client.report(a_trace("huge", output_text="y" * (300 * 1024)))
        client.report(a_trace("small-2"))
        assert client.flush(30)
        stats = client.report_stats()
    assert (stats.sent, stats.rejected, dict(stats.rejections)) == (2, 1, {"too_large": 1})
    assert sorted(stored(redis_conn)) == ["small-1", "small-2"]


def test_a_4xx_drops_only_the_traces_it_refuses(router: LiveRouter,
                                                redis_conn: redis.Redis) -> None:
    """In a batch with traces of an unknown role, only those are rejected (counted by reason)."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as client:
        for n in range(10):
            client.report(a_trace(f"good-{n}"))
            if n % 5 == 0:
                client.report(a_trace(f"orphan-{n}", role="nobody"))
        assert client.flush(10)
        stats = client.report_stats()
        # A batch of nothing but refusals (422) is settled the same way.
        client.report(a_trace("orphan-x", role="nobody"))
        assert client.flush(10)
        final = client.report_stats()
    assert (stats.sent, stats.rejected, dict(stats.rejections)) == (10, 2, {"not_found": 2})
    assert (final.sent, final.rejected) == (10, 3)
    assert sorted(stored(redis_conn)) == sorted(f"good-{n}" for n in range(10))


def test_a_429_is_retried_after_its_retry_after(app: Flask, router: LiveRouter,
                                                redis_conn: redis.Redis) -> None:
    """The router's 429 with Retry-After holds the batch that long, then it is stored."""
    posts: list[float] = []

    @app.before_request
    def quota() -> Response | None:
        if request.path == "/v1/traces" and request.method == "POST":
            posts.append(time.monotonic())
            if len(posts) == 1:
                return Response('{"error": {"code": "quota", "message": "slow down"}}',
                                status=429, headers={"Retry-After": "1"},
                                mimetype="application/json")
        return None

    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as client:
        client.report(a_trace("throttled"))
        assert client.flush(10)
        stats = client.report_stats()
    assert len(posts) == 2 and posts[1] - posts[0] >= 1.0
    assert (stats.sent, stats.failed_attempts) == (1, 1)
    assert stored(redis_conn) == ["throttled"]


def test_close_with_a_hung_router_returns_within_its_bound(router: LiveRouter) -> None:
    """close(timeout) returns by its bound while the router accepts but never answers."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as first:
        bootstrap = first.snapshot()
    hung = socket.create_server(("127.0.0.1", 0), backlog=64)  # listens, never answers
    try:
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        client = Client(url, CALLER, bootstrap=bootstrap, start_timeout=0, timeout=30)
        for n in range(5):
            client.report(a_trace(f"stuck-{n}"))
        started = time.monotonic()
        client.close(timeout=1.0)
        took = time.monotonic() - started
    finally:
        hung.close()
    assert took < 5.0  # the bound is 1 s; the HTTP timeout (30 s) is not waited for
    stats = client.report_stats()
    assert (stats.unsent, stats.sent, stats.queued) == (5, 0, 0)


def test_the_recorder_keeps_who_called_what_and_how_the_run_ended(
        router: LiveRouter, redis_conn: redis.Redis) -> None:
    """Step agents, groups, tokens and latency, and the exception that ended the run, are stored."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER, stamps=STAMPS) as client:
        with pytest.raises(TimeoutError), client.recorder(client.resolve("r", "k")) as run:
            run.tool("plan", agent="triage", model="m-small", latency_s=0.2,
                     tokens_in=30, tokens_out=4)
            run.tool("refund", {"id": 1}, agent="billing", parent_agent="triage",
                     parallel_group="g1")
            run.cost(usd=0.01, tokens_in=100, tokens_out=20)
            raise TimeoutError("model did not answer")
        with pytest.raises(TypeError, match="unknown fields"):
            client.recorder(client.resolve("r")).tool("x", agnet="typo")
        assert client.flush(10)
    trace = TraceStore(redis_conn).lookup("r", run.run_id).trace
    assert trace.error is not None and (trace.error.type, trace.error.message) == (
        "TimeoutError", "model did not answer")
    assert (trace.tokens, trace.tokens_in, trace.tokens_out) == (120, 100, 20)
    assert trace.steps is not None
    assert (trace.steps[0].agent, trace.steps[0].model, trace.steps[0].tokens_in) == (
        "triage", "m-small", 30)
    assert (trace.steps[1].parent_agent, trace.steps[1].parallel_group) == ("triage", "g1")
    assert trace.answered is False


def test_a_rejected_token_refuses_the_batch_at_once(router: LiveRouter) -> None:
    """A 401 refuses every trace of the request alike: counted by code, not bisected."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as first:
        bootstrap = first.snapshot()
    with Client(router.url, "not-a-token", bootstrap=bootstrap, start_timeout=0) as client:
        for n in range(40):
            client.report(a_trace(f"unauthorized-{n}"))
        assert client.flush(10)
        stats = client.report_stats()
    assert (stats.rejected, stats.sent, stats.splits) == (40, 0, 0)
    assert set(stats.rejections) == {"unauthorized"}


def batches_sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the size of each batch the real sender POSTs (the send itself is untouched)."""
    sizes: list[int] = []
    original = TraceReporter._send

    def counted(self: TraceReporter, batch: list[Any]) -> float | None:
        sizes.append(len(batch))
        return original(self, batch)

    monkeypatch.setattr(TraceReporter, "_send", counted)
    return sizes


def test_traces_reported_within_the_linger_share_one_post(
        router: LiveRouter, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """Traces reported within `linger` go out in one POST, when the linger ends, unflushed."""
    put_role(router, "r", current="a")
    sizes = batches_sent(monkeypatch)
    with Client(router.url, CALLER, linger=0.5) as client:
        for n in range(5):
            client.report(a_trace(f"lingered-{n}"))
            time.sleep(0.02)
        wait_for(lambda: client.report_stats().sent == 5)
    assert sizes == [5]
    assert sorted(stored(redis_conn)) == [f"lingered-{n}" for n in range(5)]


def test_flush_and_a_full_batch_do_not_wait_for_the_linger(
        router: LiveRouter, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full batch goes out at once, and flush() sends the rest at once, with a 60 s linger."""
    put_role(router, "r", current="a")
    sizes = batches_sent(monkeypatch)
    with Client(router.url, CALLER, linger=60, batch_size=4) as client:
        for n in range(6):
            client.report(a_trace(f"full-{n}"))
        wait_for(lambda: client.report_stats().sent == 4)
        started = time.monotonic()
        assert client.flush(10)
        took = time.monotonic() - started
        closing = time.monotonic()
        client.report(a_trace("at-close"))
    assert took < 10 and time.monotonic() - closing < 10  # not the 60 s linger
    assert sizes == [4, 2, 1]
    assert len(stored(redis_conn)) == 7
