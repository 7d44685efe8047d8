"""Never dark: a router started during a Redis outage serves the kept table (and seeds once
Redis answers); the embedded server killed with -9 comes back by itself."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import requests

from router.app import SNAPSHOT_FILE
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import ROOT, OwnRedis, base_env, gunicorn, rolegate_serve, wait_for
from tests.test_serve import _valkey_processes

EXAMPLE = ROOT / "bindings.example.json"
EXAMPLE_ROLES = tuple(json.loads(EXAMPLE.read_text())["roles"])

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}

pytestmark = pytest.mark.slow


def _kept_roles(data_dir: Path) -> list[str] | None:
    try:
        return sorted(json.loads((data_dir / SNAPSHOT_FILE).read_text())["roles"])
    except (OSError, ValueError):
        return None


def test_router_started_during_an_outage_serves_the_kept_table_stale(tmp_path: Path) -> None:
    """Workers that start while Redis is down answer every resolve from the kept table, stale."""
    own = OwnRedis()
    own.start()
    try:
        env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_DATA_DIR=str(tmp_path), ROLEGATE_REFRESH_INTERVAL="0.05")
        with gunicorn(env, workers=2) as url:
            r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY,
                             headers=auth(OPERATOR), timeout=5)
            assert r.status_code == 201, r.text
            wait_for(lambda: _kept_roles(tmp_path) == ["summarizer"], 10, "the kept table")
        own.stop()
        with gunicorn(env, workers=2) as url:
            answers = [requests.get(f"{url}/v1/resolve/summarizer?key=job-{i}",
                                    headers={**auth(CALLER), "Connection": "close"}, timeout=5)
                       for i in range(40)]
            assert [a.status_code for a in answers] == [200] * 40
            assert all(a.json()["stale"] is True and a.json()["version"] == 1 for a in answers)
            assert {a.json()["config"] for a in answers} <= {"cfg_a", "cfg_b"}
            own.start()  # Redis is back: the same workers serve fresh answers again
            wait_for(lambda: requests.get(f"{url}/v1/resolve/summarizer?key=k",
                                          headers=auth(CALLER), timeout=5).json()["stale"]
                     is False or None, 15, "fresh answers after the outage")
    finally:
        own.close()


def test_embedded_server_killed_with_sigkill_is_restarted_with_its_data(tmp_path: Path) -> None:
    """The master restarts a killed embedded valkey-server on the same data; writes survive."""
    data_dir = tmp_path / "data"
    env = base_env(ROLEGATE_DATA_DIR=str(data_dir), ROLEGATE_TOKENS=TOKENS,
                   ROLEGATE_REFRESH_INTERVAL="0.05")
    with rolegate_serve(env, workers=1) as url:
        r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201, r.text
        [first] = _valkey_processes(data_dir)
        os.kill(int(first), signal.SIGKILL)
        restarted = wait_for(lambda: [p for p in _valkey_processes(data_dir) if p != first]
                             or None, 20, "a restarted valkey-server")
        assert len(restarted) == 1

        def written_again() -> bool | None:
            r = requests.post(f"{url}/v1/bindings/summarizer/pause", json={"reason": "after"},
                              headers=auth(OPERATOR), timeout=5)
            return r.status_code == 200 or None

        wait_for(written_again, 20, "writes to the restarted server")
        record = requests.get(f"{url}/v1/bindings/summarizer", headers=auth(OPERATOR),
                              timeout=5).json()
        assert record["version"] == 2 and record["binding"]["paused"] is True
        health = requests.get(f"{url}/healthz", timeout=5)
        assert health.status_code == 200
    wait_for(lambda: _valkey_processes(data_dir) == [], 5,
             "the restarted server to end with serve")


def test_serve_with_a_seed_starts_while_redis_is_down_and_seeds_once_it_answers(
        tmp_path: Path) -> None:
    """`serve --seed` with Redis down starts (serving the kept table, stale) instead of
    crashing its master, and seeds the table once Redis answers."""
    own = OwnRedis(persist=False)
    env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                   ROLEGATE_DATA_DIR=str(tmp_path), ROLEGATE_REFRESH_INTERVAL="0.05")
    try:
        own.start()
        with rolegate_serve(env, "--seed", str(EXAMPLE)):
            wait_for(lambda: _kept_roles(tmp_path) == sorted(EXAMPLE_ROLES) or None, 10,
                     "the kept table")
        own.stop()  # no append-only file: it comes back empty
        with rolegate_serve(env, "--seed", str(EXAMPLE)) as url:
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 200 and r.json()["stale"] is True
            own.start()
            wait_for(lambda: _roles(url) == sorted(EXAMPLE_ROLES) or None, 20,
                     "the seed once Redis answers")
            wait_for(lambda: requests.get(f"{url}/v1/resolve/summarizer?key=k",
                                          headers=auth(CALLER), timeout=5).json()["stale"]
                     is False or None, 15, "fresh answers")
    finally:
        own.close()
    # Without a kept table the router starts too, answering 503 until the seed lands.
    empty = tmp_path / "empty"
    own = OwnRedis(persist=False)
    try:
        with rolegate_serve({**env, "REDIS_URL": own.url, "ROLEGATE_DATA_DIR": str(empty)},
                            "--seed", str(EXAMPLE)) as url:
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 503
            own.start()
            wait_for(lambda: _roles(url) == sorted(EXAMPLE_ROLES) or None, 20, "the seed")
    finally:
        own.close()


def _roles(url: str) -> list[str] | None:
    r = requests.get(f"{url}/v1/bindings", headers=auth(OPERATOR), timeout=5)
    return sorted(r.json()["roles"]) if r.status_code == 200 else None
