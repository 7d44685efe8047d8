"""While Redis lost data (issue 36): restore-snapshot writes the newest copy any worker holds
(or refuses a disagreement), reads agree, import says what it would do, traces are retryable."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import requests
from click.testing import CliRunner
from flask import Flask

from bindings.kept_copies import KEPT_KEY
from router import create_app
from router.cli import main
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.population import STAMPS
from tests.servers import (
    GUNICORN_CONFIG,
    OwnRedis,
    base_env,
    free_port,
    process,
    wait_for,
    werkzeug_server,
)

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    """A private redis-server this test may flush."""
    server = OwnRedis(persist=False)
    server.start()
    yield server
    server.close()


@pytest.fixture
def router(own: OwnRedis) -> Iterator[Flask]:
    """The router on the private server, summarizer on a canary at version 2, then flushed;
    its poller stopped, so what it has not noticed yet stays unnoticed."""
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 1})
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    assert client.post("/v1/bindings/summarizer/canary", json={"share": 0.25, "reason": "x"},
                       headers=auth(OPERATOR)).status_code == 200
    cache = app.extensions["rolegate"].cache
    cache.refresh()
    cache.stop()
    redis.Redis.from_url(own.url).flushdb()
    yield app
    app.extensions["rolegate"].redis.close()


def test_a_trace_before_the_poll_notices_the_loss_is_retryable(router: Flask) -> None:
    """The worker still holds the role Redis no longer has: 503 redis_data_lost, not 422."""
    cache = router.extensions["rolegate"].cache
    assert cache.lost == {} and "summarizer" in cache.bindings
    run = {"run_id": "r-1", "role": "summarizer", "config": "cfg_a", "arm": "current",
           "key": "job-1", "stamps": STAMPS}
    r = router.test_client().post("/v1/traces", json=run, headers=auth(CALLER))
    assert r.status_code == 503, r.json
    assert r.json["error"]["details"]["condition"] == "redis_data_lost"
    other = {**run, "run_id": "r-2", "role": "never-made"}
    r = router.test_client().post("/v1/traces", json=other, headers=auth(CALLER))
    assert r.status_code == 422 and r.json["error"]["code"] == "not_found", r.json


def test_reads_agree_while_redis_lost_the_role(router: Flask) -> None:
    """The list and the single read show the same kept record; the single read is marked."""
    client = router.test_client()
    table = client.get("/v1/bindings?view=full", headers=auth(CALLER)).json
    assert table["stale"] is True and "no record" in table["lost"]["summarizer"]
    one = client.get("/v1/bindings/summarizer", headers=auth(CALLER))
    assert one.status_code == 200, one.json
    assert one.json == table["roles"]["summarizer"] and one.json["version"] == 2
    assert one.headers["X-Rolegate-Stale"] == "redis_data_lost"
    assert client.get("/v1/bindings/other", headers=auth(CALLER)).status_code == 404
    assert client.put("/v1/bindings/other", json={"current": "cfg_o"},
                      headers=auth(OPERATOR)).status_code == 201
    fresh = client.get("/v1/bindings/other", headers=auth(CALLER))
    assert fresh.status_code == 200 and "X-Rolegate-Stale" not in fresh.headers


def test_import_against_a_stale_table_says_what_it_would_do(router: Flask,
                                                            tmp_path: Path) -> None:
    """It names the lost roles and the step to take first, and writes nothing."""
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"roles": {"summarizer": {**CANARY, "share": 0.25}}}))
    store = router.extensions["rolegate"].store
    with werkzeug_server(router) as url:
        for extra, code in (([], 1), (["--dry-run"], 0)):
            result = CliRunner().invoke(main, ["bindings", "import", str(path), *extra,
                                               "--url", url, "--token", OPERATOR])
            assert result.exit_code == code, result.output
            assert "Redis lost data: summarizer (held at version 2" in result.output
            assert "restore-snapshot" in result.output and "accept-redis" in result.output
    assert store.roles() == []


def test_a_loss_right_after_this_workers_own_write_is_noticed(own: OwnRedis) -> None:
    """Redis flushed before this worker's next poll after its write: the change hint is back
    where the worker last read it (0), yet the poll reloads and finds the role lost, and the
    role is served stale; it is not served as fresh from a Redis that no longer has it."""
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 1})  # the writes and the flush fall between polls
    client = app.test_client()
    cache = app.extensions["rolegate"].cache
    try:
        assert client.get("/healthz").status_code == 200  # loaded at hint 0, empty
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        redis.Redis.from_url(own.url).flushdb()
        cache.refresh()
        assert "summarizer" in cache.lost
        answer = client.get("/v1/resolve/summarizer?key=k", headers=auth(CALLER)).json
        assert answer["version"] == 1 and answer["stale"] is True
    finally:
        cache.stop()
        app.extensions["rolegate"].redis.close()


def test_restore_snapshot_refuses_workers_that_disagree(own: OwnRedis, router: Flask) -> None:
    """Another worker holds the same version with another binding: 409 naming the role and
    both workers; nothing written."""
    held = router.extensions["rolegate"].cache.bindings["summarizer"].model_dump(mode="json")
    held["binding"]["share"] = 0.75
    redis.Redis.from_url(own.url).hset(KEPT_KEY, "elsewhere:1", json.dumps(
        {"at": time.time(), "roles": {"summarizer": held}}))
    r = router.test_client().post("/v1/restore-snapshot", json={}, headers=auth(OPERATOR))
    assert r.status_code == 409, r.json
    assert "summarizer: workers" in r.json["error"]["message"]
    assert "elsewhere:1" in r.json["error"]["message"]
    assert router.extensions["rolegate"].store.roles() == []


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return sorted(found)


@contextmanager
def _stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _each_worker(url: str, want: tuple[int, float, bool], workers: int = 2) -> bool | None:
    """Whether `workers` workers (by pid) each answered `want` in 20 resolves."""
    answered: dict[str, tuple[int, float, bool]] = {}
    for i in range(20):
        got = requests.get(f"{url}/v1/resolve/summarizer?key=k{i}", timeout=5,
                           headers={**auth(CALLER), "Connection": "close"})
        body = got.json()
        answered[got.headers["X-Rolegate-Worker"]] = (body.get("version"), body.get("share"),
                                                      body.get("stale"))
    return (len(answered) == workers and set(answered.values()) == {want}) or None


def _versions(url: str, times: int = 10) -> set[tuple[int, float, bool]]:
    seen = set()
    for i in range(times):
        body = requests.get(f"{url}/v1/resolve/summarizer?key=k{i}",
                            headers={**auth(CALLER), "Connection": "close"}, timeout=5).json()
        seen.add((body["version"], body["share"], body["stale"]))
    return seen


@pytest.mark.slow
def test_restore_snapshot_writes_the_newest_copy_any_worker_holds(own: OwnRedis,
                                                                  tmp_path: Path) -> None:
    """Worker A took version 3, worker B was paused and holds 2 when Redis is flushed; the
    restore answered by B writes A's version 3 (as 4), and both serve it fresh."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS, ROLEGATE_DATA_DIR=str(tmp_path),
                   ROLEGATE_REFRESH_INTERVAL="0.05", ROLEGATE_FULL_RELOAD_INTERVAL="300")
    argv = [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG), "--bind",
            f"127.0.0.1:{port}", "--workers", "2", "router:create_app()"]
    admin = redis.Redis.from_url(own.url)
    with process(argv, env, url) as master:
        op = {**auth(OPERATOR), "Connection": "close"}
        assert requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=op,
                            timeout=5).status_code == 201
        assert requests.post(f"{url}/v1/bindings/summarizer/canary", headers=op, timeout=5,
                             json={"share": 0.25, "reason": "x"}).status_code == 200
        # Each worker serves v2, counted by its pid: ten answers can all come from one worker
        # (the writer) within a single poll interval of the writes.
        wait_for(lambda: _each_worker(url, (2, 0.25, False)), 10, "both on v2")
        first, second = wait_for(lambda: len(_children(master.pid)) == 2
                                 and _children(master.pid), 10, "two workers")
        with _stopped(second):
            # Only the first worker answers: it takes version 3, then Redis loses everything.
            r = requests.post(f"{url}/v1/bindings/summarizer/canary", headers=op, timeout=5,
                              json={"share": 0.6, "reason": "y"})
            assert r.status_code == 200 and r.json()["version"] == 3, r.text
            admin.flushdb()
        wait_for(lambda: len(admin.hkeys(KEPT_KEY)) == 2 or None, 10,
                 "both workers to publish their kept copies")
        # Each worker serves its own kept copy, marked stale (which one answers is the kernel's).
        seen: set[tuple[int, float, bool]] = set()
        wait_for(lambda: seen.update(_versions(url, 4))
                 or seen == {(2, 0.25, True), (3, 0.6, True)} or None, 10,
                 "both kept copies served, stale")
        with _stopped(first):
            # Answered by the worker holding the older copy.
            r = requests.post(f"{url}/v1/restore-snapshot", json={"reason": "flushed"},
                              headers=op, timeout=5)
        assert r.status_code == 200, r.text
        assert r.json()["restored"] == {"summarizer": 4}, r.json()
        stored = json.loads(admin.hget("rolegate:{summarizer}:binding", "record"))
        assert stored["version"] == 4 and stored["binding"]["share"] == 0.6
        wait_for(lambda: _versions(url) == {(4, 0.6, False)} or None, 10,
                 "both workers on the restored newest copy")
        wait_for(lambda: admin.hlen(KEPT_KEY) == 0 or None, 10, "the copies withdrawn")
    admin.close()


def test_a_trace_for_a_role_redis_shows_older_is_retryable(own: OwnRedis) -> None:
    """Redis went back to version 1 (no candidate) while the worker holds version 2: a
    candidate trace is a 503 redis_data_lost to send again, not a 422 config_not_bound."""
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 1})
    client = app.test_client()
    try:
        assert client.put("/v1/bindings/summarizer", json={"current": "cfg_a"},
                          headers=auth(OPERATOR)).status_code == 201
        conn = redis.Redis.from_url(own.url)
        older = conn.hgetall("rolegate:{summarizer}:binding")
        r = client.put("/v1/bindings/summarizer", json=CANARY,
                       headers={**auth(OPERATOR), "If-Match": "1"})
        assert r.status_code == 200, r.json
        cache = app.extensions["rolegate"].cache
        cache.refresh()
        cache.stop()
        conn.hset("rolegate:{summarizer}:binding", mapping=older)  # the backup's record
        run = {"run_id": "r-9", "role": "summarizer", "config": "cfg_b", "arm": "candidate",
               "key": "job-9", "stamps": STAMPS}
        r = client.post("/v1/traces", json=run, headers=auth(CALLER))
        assert r.status_code == 503, r.json
        assert r.json["error"]["details"]["condition"] == "redis_data_lost"
        conn.close()
    finally:
        app.extensions["rolegate"].redis.close()


def test_a_worker_that_never_held_a_role_knows_it_was_archived(own: OwnRedis) -> None:
    """The archived versions are read from Redis (rolegate:archived), so a worker started after
    an archive still takes a backup's live record of that role for lost data."""
    first = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    client = first.test_client()
    conn = redis.Redis.from_url(own.url)
    assert client.put("/v1/bindings/planner", json={"current": "cfg_p"},
                      headers=auth(OPERATOR)).status_code == 201
    backup = conn.hgetall("rolegate:{planner}:binding")
    backup_generation = conn.get("rolegate:generation")
    assert client.delete("/v1/bindings/planner", json={"reason": "retired"},
                         headers=auth(OPERATOR)).status_code == 200
    later = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    try:
        cache = later.extensions["rolegate"].cache
        cache.refresh()
        cache.stop()
        assert cache.archived == {"planner": 2} and "planner" not in cache.bindings
        # The backup's state comes back: planner live at version 1, no archive note.
        conn.delete("rolegate:{planner}:binding", "rolegate:archived")
        conn.hset("rolegate:{planner}:binding", mapping=backup)
        conn.sadd("rolegate:roles", "planner")
        conn.set("rolegate:generation", backup_generation)
        assert cache.refresh() is False
        assert "archived at version 2" in cache.lost["planner"]
        view = later.test_client()
        assert view.get("/v1/bindings/planner", headers=auth(CALLER)).status_code == 410
        assert view.get("/v1/resolve/planner?key=k", headers=auth(CALLER)).status_code == 410
    finally:
        conn.close()
        for app in (first, later):
            app.extensions["rolegate"].cache.stop()
            app.extensions["rolegate"].redis.close()
