"""A restore that takes (issue 36): Redis restored from an RDB backup under running routers,
then `rolegate bindings accept-redis` makes every router serve Redis's table, in history."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from click.testing import CliRunner

from router import create_app
from router.cli import main
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import OwnRedis, base_env, gunicorn, wait_for

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}


def _resolve(url: str, role: str, key: str = "job-1") -> requests.Response:
    # A new connection each time: over two workers, both answer some.
    return requests.get(f"{url}/v1/resolve/{role}?key={key}",
                        headers={**auth(CALLER), "Connection": "close"}, timeout=5)


def _every_answer(url: str, role: str, check: Any, times: int = 8) -> bool | None:
    return all(check(_resolve(url, role, f"k-{i}")) for i in range(times)) or None


def _both_workers(url: str, check: Any, seen: set[str], times: int = 6) -> bool | None:
    """`check` holds on `times` fresh /healthz bindings checks, and both workers (counted by
    X-Rolegate-Worker into `seen`) have answered: all answers can come from one under load."""
    answers = [requests.get(f"{url}/healthz", headers={**auth(OPERATOR), "Connection": "close"},
                            timeout=5) for _ in range(times)]
    if not all(check(a.json()["checks"]["bindings"]) for a in answers):
        return None
    seen.update(a.headers["X-Rolegate-Worker"] for a in answers)
    return len(seen) == 2 or None


def _health(url: str) -> dict[str, Any]:
    found: dict[str, Any] = requests.get(f"{url}/healthz", headers=auth(OPERATOR),
                                         timeout=5).json()
    return found


def _every_health(url: str, check: Any, times: int = 6) -> dict[str, Any] | None:
    """The bindings check of `times` fresh /healthz answers, when `check` holds for each."""
    found: list[dict[str, Any]] = [
        requests.get(f"{url}/healthz", headers={**auth(OPERATOR), "Connection": "close"},
                     timeout=5).json()["checks"]["bindings"] for _ in range(times)]
    return found[0] if all(check(each) for each in found) else None


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    """A private redis-server this test restores from a backup."""
    server = OwnRedis(persist=False)
    server.start()
    yield server
    server.close()


@pytest.mark.slow
def test_a_restore_from_an_rdb_backup_takes_on_running_routers(own: OwnRedis,
                                                              tmp_path: Path) -> None:
    """Back up, change the table, restore the RDB under two running routers (2 workers each):
    they keep their newer copies and /healthz names accept-redis; after it every worker of
    both serves Redis's table (fresh, a role made after the backup gone), with history, and
    a restarted router does too."""
    def env(name: str) -> dict[str, str]:
        return base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                        ROLEGATE_DATA_DIR=str(tmp_path / name),
                        ROLEGATE_REFRESH_INTERVAL="0.05")

    op = auth(OPERATOR)
    with gunicorn(env("a"), workers=2) as a, gunicorn(env("b"), workers=2) as b:
        assert requests.put(f"{a}/v1/bindings/summarizer", json=CANARY, headers=op,
                            timeout=5).status_code == 201
        assert requests.put(f"{a}/v1/bindings/planner", json={"current": "cfg_p"},
                            headers=op, timeout=5).status_code == 201
        # The backup, as docs/maintenance.md takes it (SAVE: BGSAVE, waited for).
        admin = redis.Redis.from_url(own.url)
        admin.save()
        backup = tmp_path / "backup.rdb"
        shutil.copy(Path(own.dir.name) / "dump.rdb", backup)
        # After the backup: a canary move, a new role, an archived one.
        r = requests.post(f"{a}/v1/bindings/summarizer/canary",
                          json={"share": 0.25, "reason": "after the backup"}, headers=op,
                          timeout=5)
        assert r.status_code == 200, r.text
        assert requests.put(f"{b}/v1/bindings/late", json={"current": "cfg_l"}, headers=op,
                            timeout=5).status_code == 201
        assert requests.delete(f"{b}/v1/bindings/planner", json={"reason": "retired"},
                               headers=op, timeout=5).status_code == 200
        for url in (a, b):
            wait_for(lambda url=url: _every_answer(url, "summarizer",
                                                   lambda r: r.json()["version"] == 2),
                     10, "every worker on version 2")
            wait_for(lambda url=url: _every_answer(url, "late",
                                                   lambda r: r.status_code == 200),
                     10, "every worker serving the new role")
            wait_for(lambda url=url: _every_answer(url, "planner",
                                                   lambda r: r.status_code == 410),
                     10, "every worker dropping the archived role")
            # /healthz has the worker answering poll now: every worker holds this table.
            now = int(admin.get("rolegate:generation") or 0)
            caught_up: set[str] = set()
            wait_for(lambda url=url, now=now, seen=caught_up: _both_workers(
                url, lambda c: c["generation"] >= now, seen), 10, "every worker caught up")
        admin.close()

        # The restore, as docs/maintenance.md does it: stop, put the RDB in place, start.
        own.stop()
        shutil.copy(backup, Path(own.dir.name) / "dump.rdb")
        own.start()
        assert redis.Redis.from_url(own.url).hget("rolegate:{summarizer}:binding",
                                                  "version") == b"1"
        for url in (a, b):
            # What an operator waits for: /healthz naming the loss, on every worker.
            check = wait_for(lambda url=url: _every_health(
                url, lambda c: c.get("lost_roles") == ["late", "planner", "summarizer"]),
                10, "every worker to report the routers' newer tables")
            assert check["condition"] == "redis_data_lost"
            assert "rolegate bindings accept-redis" in check["message"]
            assert "rolegate bindings restore-snapshot" in check["message"]
            answer = _resolve(url, "summarizer")
            assert answer.json()["version"] == 2 and answer.json()["stale"] is True
            # The role archived after the backup does not come back silently: every read
            # agrees it is archived until the operator says otherwise.
            assert _every_answer(url, "planner", lambda r: r.status_code == 410)
            table = requests.get(f"{url}/v1/bindings", headers=op, timeout=5).json()
            assert "planner" not in table["roles"]
            assert "archived at version 2" in table["lost"]["planner"]
            assert requests.get(f"{url}/v1/bindings/planner", headers=op,
                                timeout=5).status_code == 410

        result = CliRunner().invoke(main, ["bindings", "accept-redis", "--url", a, "--token",
                                           OPERATOR, "--reason", "restored Monday's backup"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "summarizer: Redis's record taken as version 3" in result.output
        assert "late: Redis's record taken as version 2" in result.output
        assert "planner: Redis's record taken as version 3 (archived at version 2" in (
            result.output)

        for url in (a, b):
            wait_for(lambda url=url: _every_answer(
                url, "summarizer", lambda r: r.json()["version"] == 3
                and r.json()["share"] == 0.5 and r.json()["stale"] is False),
                10, "every worker serving Redis's summarizer")
            wait_for(lambda url=url: _every_answer(url, "late",
                                                   lambda r: r.status_code == 410),
                     10, "every worker dropping the role Redis has no record of")
            wait_for(lambda url=url: _every_answer(
                url, "planner", lambda r: r.status_code == 200 and r.json()["version"] == 3),
                10, "every worker serving the role Redis has live, as accepted")
            wait_for(lambda url=url: _health(url)["status"] == "ok" or None, 10,
                     "health ok again")
        [entry, *_] = requests.get(f"{a}/v1/bindings/summarizer/history", headers=op,
                                   timeout=5).json()["entries"]
        assert entry["action"] == "accept_redis" and entry["version"] == 3
        assert entry["reason"] == "restored Monday's backup"
        assert entry["details"]["kept_version"] == 2 and entry["details"]["found"] == "version 1"
        # Nothing left to accept: a second run says so and writes nothing.
        again = CliRunner().invoke(main, ["bindings", "accept-redis", "--url", b, "--token",
                                          OPERATOR], catch_exceptions=False)
        assert again.exit_code == 0 and "nothing to accept" in again.output
    with gunicorn(env("a"), workers=1) as a:
        # Restarted on the same data dir: its file is the accepted table.
        answer = _resolve(a, "summarizer")
        assert answer.json()["version"] == 3 and answer.json()["stale"] is False
        assert _health(a)["status"] == "ok"


def test_accept_redis_needs_an_operator_for_every_role(redis_url: str) -> None:
    """A caller, or an operator limited to some roles, is refused; a bad body is a 4xx."""
    app = create_app({"redis_url": redis_url, "tokens": f"{TOKENS},lim=lim-secret:operator:x",
                      "testing": True})
    client = app.test_client()
    try:
        assert client.post("/v1/accept-redis", json={}, headers=auth(CALLER)).status_code == 403
        assert client.post("/v1/accept-redis", json={},
                           headers=auth("lim-secret")).status_code == 403
        bad = client.post("/v1/accept-redis", json={"reason": 5}, headers=auth(OPERATOR))
        assert 400 <= bad.status_code < 500 and "reason" in bad.get_data(as_text=True)
        ok = client.post("/v1/accept-redis", json={}, headers=auth(OPERATOR))
        assert ok.status_code == 200 and ok.json == {"accepted": {}, "skipped": {},
                                                     "lost": {}, "still_lost": []}
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
