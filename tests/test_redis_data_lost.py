"""Redis that lost its data (FLUSHDB, an empty restart): routers keep the last good table,
say so, keep it on disk, and one command writes it back; a real archive of every role still
empties the table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from click.testing import CliRunner
from flask import Flask

from bindings.models import VersionedBinding
from bindings.table_guard import kept_table, lost_roles
from router import create_app
from router.app import SNAPSHOT_FILE
from router.cli import main
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.population import STAMPS
from tests.servers import OwnRedis, base_env, gunicorn, wait_for, werkzeug_server

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}
ROLES = ("summarizer", "planner")


def _record(role: str, version: int) -> VersionedBinding:
    return VersionedBinding.model_validate({
        "role": role, "version": version, "updated_at": 1.0, "updated_by": "t",
        "binding": {"current": "cfg_a"}})


def test_guard_keeps_roles_gone_or_older_and_takes_archives_above_the_held_version() -> None:
    """Pure guard: gone, older or archived-not-above is lost; newer or archived-above is taken."""
    held = {r: _record(r, 3) for r in ("gone", "older", "same", "newer", "archived", "bad_arch")}
    loaded = {"older": _record("older", 2), "same": _record("same", 3),
              "newer": _record("newer", 4), "fresh": _record("fresh", 1)}
    lost = lost_roles(held, loaded, {"archived": 4, "bad_arch": 3})
    assert sorted(lost) == ["bad_arch", "gone", "older"]
    assert "no record" in lost["gone"] and "version 2" in lost["older"]
    served = kept_table(held, loaded, lost)
    assert sorted(served) == ["bad_arch", "fresh", "gone", "newer", "older", "same"]
    assert served["older"].version == 3 and served["newer"].version == 4
    assert lost_roles({}, {}, {}) == {} and lost_roles(held, {}, {r: 4 for r in held}) == {}


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    """A private redis-server this test may flush."""
    server = OwnRedis(persist=False)
    server.start()
    yield server
    server.close()


@pytest.fixture
def router(own: OwnRedis) -> Iterator[Flask]:
    """The router on the private server with two roles on a canary (each at version 2)."""
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 1})
    client = app.test_client()
    for role in ROLES:
        assert client.put(f"/v1/bindings/{role}", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        assert client.post(f"/v1/bindings/{role}/canary", json={"share": 0.25, "reason": "x"},
                           headers=auth(OPERATOR)).status_code == 200
    app.extensions["rolegate"].cache.refresh()
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_a_flush_keeps_the_table_stale_degrades_health_and_restore_writes_it_back(
        own: OwnRedis, router: Flask) -> None:
    """After a FLUSHDB resolves keep answering (stale), health names redis_data_lost, GET
    /v1/bindings keeps the roles, and restore-snapshot writes them back with history."""
    client = router.test_client()
    cache = router.extensions["rolegate"].cache
    redis.Redis.from_url(own.url).flushdb()
    assert cache.refresh() is False
    for role in ROLES:
        r = client.get(f"/v1/resolve/{role}?key=job-1", headers=auth(CALLER))
        assert r.status_code == 200, r.json
        assert r.json["stale"] is True and r.json["version"] == 2
    health = client.get("/healthz", headers=auth(OPERATOR))
    assert health.status_code == 200 and health.json["status"] == "degraded"
    check = health.json["checks"]["bindings"]
    assert check["condition"] == "redis_data_lost" and check["lost_roles"] == sorted(ROLES)
    assert check["ok"] is False and check["stale"] is True
    assert client.get("/healthz").json == {"status": "degraded"}
    table = client.get("/v1/bindings", headers=auth(CALLER)).json
    assert sorted(table["roles"]) == sorted(ROLES) and table["stale"] is True
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "rolegate_bindings_lost_roles 2.0" in metrics
    run = {"run_id": "r-1", "role": "summarizer", "config": "cfg_a", "arm": "current",
           "key": "job-1", "stamps": STAMPS}
    r = client.post("/v1/traces", json=run, headers=auth(CALLER))
    assert r.status_code == 503, r.json  # not a 422: the sender keeps it and retries
    assert r.json["error"]["details"]["condition"] == "redis_data_lost"

    r = client.post("/v1/restore-snapshot", json={"reason": "redis volume lost"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200, r.json
    assert r.json["restored"] == {"planner": 3, "summarizer": 3} and r.json["still_lost"] == []
    history = client.get("/v1/bindings/summarizer/history", headers=auth(OPERATOR)).json
    [entry] = history["entries"]
    assert entry["action"] == "restore_snapshot" and entry["reason"] == "redis volume lost"
    assert entry["details"]["kept_version"] == 2 and entry["version"] == 3
    record = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR)).json
    assert record["version"] == 3 and record["binding"]["share"] == 0.25
    r = client.get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
    assert r.json["stale"] is False and r.json["version"] == 3
    assert cache.generation > 0  # the hint went above the kept table's
    r = client.post("/v1/traces", json=run, headers=auth(CALLER))
    assert r.status_code == 200 and r.json["accepted"] == 1, r.json


def test_archiving_every_role_empties_the_table(router: Flask) -> None:
    """An operator's archive of every role is real: the table empties, nothing is lost."""
    client = router.test_client()
    cache = router.extensions["rolegate"].cache
    for role in ROLES:
        r = client.delete(f"/v1/bindings/{role}", json={"reason": "retired"},
                          headers=auth(OPERATOR))
        assert r.status_code == 200, r.json
    other = create_app({"redis_url": router.extensions["rolegate"].settings.redis_url,
                        "tokens": TOKENS, "testing": True, "refresh_interval_s": 1})
    try:
        # A second worker that held both roles before the archive takes it too.
        other_cache = other.extensions["rolegate"].cache
        other_cache.bindings = dict(cache.bindings)
        other_cache.loaded = True
        for each in (cache, other_cache):
            assert each.refresh() is True
            assert each.bindings == {} and each.lost == {}
        assert other.test_client().get("/v1/resolve/summarizer",
                                       headers=auth(CALLER)).status_code == 410
        assert client.get("/healthz").json["status"] == "ok"
    finally:
        other.extensions["rolegate"].cache.stop()
        other.extensions["rolegate"].redis.close()


def test_discard_archives_the_lost_roles_everywhere(own: OwnRedis, router: Flask) -> None:
    """restore-snapshot --discard writes the lost roles back archived: they leave the table."""
    redis.Redis.from_url(own.url).flushdb()
    cache = router.extensions["rolegate"].cache
    assert cache.refresh() is False
    with werkzeug_server(router) as url:
        result = CliRunner().invoke(main, ["bindings", "restore-snapshot", "--discard",
                                           "--url", url, "--token", OPERATOR],
                                    catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "summarizer: discarded (archived) as version 3" in result.output
    assert cache.lost == {} and cache.bindings == {}
    client = router.test_client()
    assert client.get("/v1/resolve/summarizer", headers=auth(CALLER)).status_code == 410
    [entry, *_] = client.get("/v1/bindings/planner/history", headers=auth(OPERATOR)).json[
        "entries"]
    assert entry["action"] == "discard_snapshot"


def _kept_roles(data_dir: Path) -> list[str] | None:
    try:
        return sorted(json.loads((data_dir / SNAPSHOT_FILE).read_text())["roles"])
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_gunicorn_router_keeps_serving_and_its_file_through_an_empty_restart(
        tmp_path: Path) -> None:
    """Redis restarted on an empty volume under a served router: every resolve answers 200
    (stale), the kept file keeps its roles, a restarted router guards the file too, and
    the CLI's restore-snapshot brings fresh answers back."""
    own = OwnRedis(persist=False)
    own.start()
    try:
        env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_DATA_DIR=str(tmp_path), ROLEGATE_REFRESH_INTERVAL="0.05")
        with gunicorn(env, workers=2) as url:
            r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY,
                             headers=auth(OPERATOR), timeout=5)
            assert r.status_code == 201, r.text
            wait_for(lambda: _kept_roles(tmp_path) == ["summarizer"], 10, "the kept table")
            # Both workers must hold the role before Redis loses it: a worker whose poll had
            # not yet seen the PUT never served it, and rightly answers 404 (the flake under
            # load: {200, 404}).
            serving: set[str] = set()

            def both_serve() -> bool | None:
                got = requests.get(f"{url}/v1/resolve/summarizer?key=w",
                                   headers={**auth(CALLER), "Connection": "close"}, timeout=5)
                if got.status_code == 200:
                    serving.add(got.headers["X-Rolegate-Worker"])
                return len(serving) == 2 or None

            wait_for(both_serve, 10, "both workers to serve the role")
            own.stop()
            own.start()  # same port, no data: an empty volume
            wait_for(lambda: requests.get(f"{url}/healthz", timeout=5).json()["status"]
                     == "degraded" or None, 10, "health to name the loss")
            # Each worker notices the loss at its own next poll (every 0.05 s here): until
            # the other has, its answers are the same table, not yet marked stale. Every
            # answer meanwhile must still be a 200.
            seen: list[int] = []

            def all_stale() -> bool | None:
                got = [requests.get(f"{url}/v1/resolve/summarizer?key=w-{i}",
                                    headers={**auth(CALLER), "Connection": "close"}, timeout=5)
                       for i in range(6)]
                seen.extend(a.status_code for a in got)
                return all(a.status_code == 200 and a.json()["stale"] for a in got) or None

            wait_for(all_stale, 10, "both workers to mark their answers stale")
            assert set(seen) == {200}
            answers = [requests.get(f"{url}/v1/resolve/summarizer?key=job-{i}",
                                    headers={**auth(CALLER), "Connection": "close"}, timeout=5)
                       for i in range(20)]
            assert [a.status_code for a in answers] == [200] * 20
            assert all(a.json()["stale"] is True for a in answers)
        assert _kept_roles(tmp_path) == ["summarizer"]
        with gunicorn(env, workers=1) as url:
            # A router started afresh on the empty Redis guards the file it kept.
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 200 and r.json()["stale"] is True
            health = requests.get(f"{url}/healthz", headers=auth(OPERATOR), timeout=5).json()
            assert health["checks"]["bindings"]["condition"] == "redis_data_lost"
            result = CliRunner().invoke(main, ["bindings", "restore-snapshot", "--url", url,
                                               "--token", OPERATOR], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert "summarizer: restored as version 2" in result.output
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.json()["stale"] is False and r.json()["version"] == 2
            assert requests.get(f"{url}/healthz", timeout=5).json()["status"] == "ok"
    finally:
        own.close()
