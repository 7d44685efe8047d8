"""A kept table belongs to its Redis, and a data directory to one router (issue 36)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import requests

from bindings.connection import RedisTarget
from bindings.identity import IDENTITY_KEY, describe, same_redis
from router.app import SNAPSHOT_FILE
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import GUNICORN_CONFIG, OwnRedis, base_env, free_port, gunicorn, wait_for


def test_describe_names_host_port_and_database_never_the_password() -> None:
    """The recorded address: host:port/db (from the path or ?db=), no credentials."""
    assert describe(RedisTarget("redis://:pw@cache.internal:6380/2")) == "cache.internal:6380/2"
    assert describe(RedisTarget("redis://cache.internal")) == "cache.internal:6379/0"
    assert describe(RedisTarget("unix:///run/redis.sock?db=3")) == "unix:/run/redis.sock/3"
    assert describe(RedisTarget("", sentinels=(("s", 26379),),
                                sentinel_master="main")) == "sentinel:main/0"


def test_same_redis_by_address_or_by_an_equal_identity() -> None:
    """Same address: same Redis (a loss there stays a loss); elsewhere only an equal identity."""
    kept = {"address": "a:6379/0", "identity": "x"}
    assert same_redis(kept, "a:6379/0", None) and same_redis(kept, "a:6379/0", "y")
    assert same_redis(kept, "b:6379/0", "x")
    assert not same_redis(kept, "b:6379/0", "y") and not same_redis(kept, "b:6379/0", None)
    assert not same_redis(kept, "a:6379/1", None)
    assert same_redis(None, "b:6379/0", None)  # a file from before origins were kept


def _kept(data_dir: Path) -> dict[str, object] | None:
    try:
        found: dict[str, object] = json.loads((data_dir / SNAPSHOT_FILE).read_text())
        return found
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_a_router_on_another_redis_sets_the_kept_table_aside(tmp_path: Path) -> None:
    """A router started on a data dir whose table came from another (empty) Redis serves none
    of it, reports no loss, sets the file aside and says so once; its own table is kept."""
    first, second = OwnRedis(persist=False), OwnRedis(persist=False)
    first.start()
    second.start()
    try:
        env = base_env(REDIS_URL=first.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_DATA_DIR=str(tmp_path), ROLEGATE_REFRESH_INTERVAL="0.05")
        with gunicorn(env, workers=2) as url:
            assert requests.put(f"{url}/v1/bindings/summarizer", json={"current": "cfg_a"},
                                headers=auth(OPERATOR), timeout=5).status_code == 201
            wait_for(lambda: "summarizer" in (_kept(tmp_path) or {}).get("roles", {}), 10,
                     "the kept table")  # type: ignore[operator]
        kept = _kept(tmp_path)
        assert kept is not None and kept["redis"]["address"] == describe(  # type: ignore[index]
            RedisTarget(first.url))
        log = tmp_path / "second.log"
        with gunicorn({**env, "REDIS_URL": second.url}, workers=2, output=log) as url:
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 404, r.text
            health = requests.get(f"{url}/healthz", headers=auth(OPERATOR), timeout=5).json()
            assert health["status"] == "ok" and "condition" not in health["checks"]["bindings"]
            assert requests.put(f"{url}/v1/bindings/planner", json={"current": "cfg_p"},
                                headers=auth(OPERATOR), timeout=5).status_code == 201
            wait_for(lambda: "planner" in (_kept(tmp_path) or {}).get("roles", {}), 10,
                     "the second Redis's table kept")  # type: ignore[operator]
        text = log.read_text()
        assert text.count("not this router's Redis") == 1, text[-3000:]
        assert "redis_data_lost" not in text and "Redis lost data" not in text
        [aside] = tmp_path.glob(f"{SNAPSHOT_FILE}.other-redis-*")
        assert "summarizer" in json.loads(aside.read_text())["roles"]
        now = _kept(tmp_path)
        assert now is not None and sorted(now["roles"]) == ["planner"]  # type: ignore[call-overload]
        identity = redis.Redis.from_url(second.url).get(IDENTITY_KEY)
        assert identity and now["redis"]["identity"] == identity.decode()  # type: ignore[index]
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_a_second_router_on_a_live_routers_data_dir_refuses_to_start(tmp_path: Path) -> None:
    """The second gunicorn exits naming the directory; the first's metrics files stay and its
    counters keep counting."""
    own = OwnRedis(persist=False)
    own.start()
    try:
        env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_DATA_DIR=str(tmp_path))
        with gunicorn(env, workers=2) as url:
            assert requests.put(f"{url}/v1/bindings/summarizer", json={"current": "cfg_a"},
                                headers=auth(OPERATOR), timeout=5).status_code == 201

            def resolves() -> float:
                text = requests.get(f"{url}/metrics", timeout=5).text
                return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith("rolegate_resolves_total{"))

            for i in range(20):
                requests.get(f"{url}/v1/resolve/summarizer?key=k{i}", headers=auth(CALLER),
                             timeout=5)
            before = wait_for(lambda: resolves() >= 20 and resolves(), 10, "counted resolves")
            files = sorted(p.name for p in (tmp_path / "prometheus").iterdir())
            port = free_port()
            second = subprocess.run(
                [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG), "--bind",
                 f"127.0.0.1:{port}", "--workers", "1", "router:create_app()"],
                env=env, capture_output=True, text=True, timeout=60)
            assert second.returncode != 0
            assert f"ROLEGATE_DATA_DIR {tmp_path.resolve()} is in use by another router" in (
                second.stderr + second.stdout), second.stderr[-2000:]
            assert sorted(p.name for p in (tmp_path / "prometheus").iterdir()) == files
            requests.get(f"{url}/v1/resolve/summarizer?key=again", headers=auth(CALLER),
                         timeout=5)
            assert resolves() == before + 1
        # Once the first is gone the directory is free again.
        with gunicorn(env, workers=1) as url:
            assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        own.close()
