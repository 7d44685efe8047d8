"""The client's lifetime: construction that never blocks, asyncio, forks, a saved snapshot, allowed()."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask, Response, request

from gatekeeper.store.traces import TraceStore
from rolegate import AsyncClient, Client, NotFound, SnapshotUnavailable
from tests.conftest import CALLER
from tests.live import (
    LiveRouter,
    put_role,
    refused_url,
    rollback,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent
STAMPS = {"agent_version": "agent-1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A loopback URL that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_construction_with_no_wait_never_blocks_and_resolve_says_why(hung_url: str) -> None:
    """start_timeout=0 returns at once; resolving before any snapshot raises a clear error."""
    client = Client(hung_url, CALLER, start_timeout=0, timeout=30)
    try:
        with pytest.raises(SnapshotUnavailable, match="no bindings snapshot yet"):
            client.resolve("r", "k")
        assert client.stale and client.generation == -1
    finally:
        client.close(timeout=0)


def test_the_sync_client_waits_at_most_start_timeout(hung_url: str) -> None:
    """Against a hung router the constructor gives up after start_timeout with the reason."""
    with pytest.raises(SnapshotUnavailable, match="did not answer within 0.5s"):
        Client(hung_url, CALLER, start_timeout=0.5, timeout=30)


def test_async_client_keeps_the_event_loop_running(router: LiveRouter, hung_url: str) -> None:
    """AsyncClient builds without blocking the loop, awaits its first snapshot, resolves."""
    put_role(router, "r", current="a", candidate="b", stage="canary", share=0.5)

    async def scenario() -> tuple[int, dict[str, Any], bool]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(ticker())
        with pytest.raises(SnapshotUnavailable):
            await AsyncClient.create(hung_url, CALLER, ready_timeout=0.5, timeout=30)
        during_hang = ticks
        async with await AsyncClient.create(router.url, CALLER, stamps=STAMPS) as client:
            resolution = dict(client.resolve("r", "job-7"))
            with client.recorder(resolution) as run:
                run.output("done")
            flushed = await client.aflush(10)
        beat.cancel()
        return during_hang, resolution, flushed

    during_hang, resolution, flushed = asyncio.run(scenario())
    assert during_hang >= 10  # the loop kept ticking while the hung router was awaited
    assert resolution["role"] == "r" and resolution["stale"] is False and flushed


def test_a_restarted_agent_starts_from_the_saved_snapshot(router: LiveRouter,
                                                         tmp_path: Path) -> None:
    """With snapshot_path, a client started while the router is down answers from the file."""
    # No holdback: with the rollout's own salt, job-1 fell in full's 5% holdback (current,
    # "a") once in about 20 runs, and this test is about the saved file, not the split.
    put_role(router, "r", current="a", candidate="b", stage="full", share=1.0, holdback=0.0)
    saved = tmp_path / "rolegate-snapshot.json"
    with Client(router.url, CALLER, snapshot_path=saved) as first:
        expected = first.resolve("r", "job-1")
    assert json.loads(saved.read_text())["roles"]["r"]["binding"]["candidate"] == "b"
    router.stop()
    with Client(router.url, CALLER, snapshot_path=saved) as restarted:
        answer = restarted.resolve("r", "job-1")
    assert answer["config"] == expected["config"] == "b" and answer["stale"] is True


def test_a_corrupt_saved_snapshot_is_skipped(tmp_path: Path) -> None:
    """A saved file that does not parse is ignored (logged); without another source, no snapshot."""
    saved = tmp_path / "snapshot.json"
    saved.write_text("{not json")
    with pytest.raises(SnapshotUnavailable):
        Client(refused_url(), CALLER, snapshot_path=saved)


FORKED = """
import json, os, sys
from rolegate import Client
client = Client(sys.argv[1], sys.argv[2], refresh_interval=0.1)
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    first = client.stale
    for n in range(5):
        client.report({"run_id": f"child-{n}", "role": "r", "config": "a", "arm": "current",
                       "stamps": %(stamps)r})
    client.flush(10)
    ready = client.wait_ready(10)
    os.write(write, json.dumps({"stale_at_fork": first, "ready": ready,
                                "stale_later": client.stale,
                                "sent": client.report_stats().sent}).encode())
    client.close()
    os._exit(0)
os.close(write)
client.report({"run_id": "parent-0", "role": "r", "config": "a", "arm": "current",
               "stamps": %(stamps)r})
os.waitpid(pid, 0)
print(os.read(read, 4096).decode())
client.close()
""".replace("%(stamps)r", repr(STAMPS))


def test_a_forked_childs_traces_arrive(router: LiveRouter, redis_conn: redis.Redis) -> None:
    """After os.fork() the child restarts its threads: its traces are sent, its snapshot is
    stale until the router answers it."""
    put_role(router, "r", current="a")
    done = subprocess.run([sys.executable, "-c", FORKED, router.url, CALLER], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    child = json.loads(done.stdout.strip().splitlines()[-1])
    assert child == {"stale_at_fork": True, "ready": True, "stale_later": False, "sent": 5}
    ids = sorted(s.trace.run_id for s in TraceStore(redis_conn).read("r", "a", "current"))
    assert ids == ["child-0", "child-1", "child-2", "child-3", "child-4", "parent-0"]


def test_allowed_applies_the_roles_tool_rules(router: LiveRouter) -> None:
    """allowed() is False for a forbidden tool and one outside the allowlist, and follows changes."""
    put_role(router, "r", current="a", candidate="b", stage="canary", share=0.5,
             gate={"invariants": {"forbidden_tools": ["delete_account"],
                                  "allowed_tools": ["search", "delete_account", "email"]}})
    put_role(router, "open", current="a")
    with Client(router.url, CALLER, refresh_interval=0.05) as client:
        resolution = client.resolve("r", "job-1")
        assert client.allowed(resolution, "search") is True
        assert client.allowed(resolution, "delete_account") is False
        assert client.allowed(resolution, "shell") is False  # outside the allowlist
        assert client.allowed(client.resolve("open"), "anything") is True
        with pytest.raises(NotFound):
            client.allowed({"role": "ghost"}, "search")
        rollback(router, "r")
        router.api("PUT", "/v1/bindings/r", json={"current": "a"},
                   headers={"If-Match": str(router.api("GET", "/v1/bindings/r")["version"])})
        wait_for(lambda: client.allowed(client.resolve("r"), "shell"))


def test_the_refresh_thread_honours_retry_after(app: Flask, router: LiveRouter) -> None:
    """A 429 with Retry-After on the snapshot poll holds the next poll that long."""
    gets: list[float] = []

    @app.before_request
    def quota() -> Response | None:
        if request.path == "/v1/bindings":
            gets.append(time.monotonic())
            if len(gets) == 2:
                return Response('{"error": {"code": "quota", "message": "slow down"}}',
                                status=429, headers={"Retry-After": "1"},
                                mimetype="application/json")
        return None

    put_role(router, "r", current="a")
    with Client(router.url, CALLER, refresh_interval=0.05, subscribe=False):
        wait_for(lambda: len(gets) >= 4, timeout=10)
    assert gets[2] - gets[1] >= 1.0  # held for Retry-After, not refresh_interval
    assert gets[3] - gets[2] < 1.0  # then back to the usual interval
