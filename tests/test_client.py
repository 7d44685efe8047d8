"""The caller client against a live router (a werkzeug server on loopback) and the real Redis."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from bindings.models import Binding, VersionedBinding
from rolegate.client import Client, SnapshotTooOld, SnapshotUnavailable
from rolegate.routing import resolve
from rolegate.run_ids import is_minted, run_id_of
from router.api.resolve import resolve_role
from router.api.watch import notifier
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.live import (
    LiveRouter,
    canary,
    put_role,
    refused_url,
    rollback,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)
from tests.servers import base_env, gunicorn


@pytest.mark.slow
def test_local_answers_equal_the_servers_for_10000_keys(router: LiveRouter, app: Flask) -> None:
    """Every stage resolves locally exactly as the server's /v1/resolve does, key by key."""
    put_role(router, "stable", current="a")
    put_role(router, "shadowed", current="a", candidate="b", stage="shadow")
    put_role(router, "canaried", current="a", candidate="b")
    canary(router, "canaried", 0.3)
    put_role(router, "full", current="a", candidate="b")
    canary(router, "full", 1.0)
    put_role(router, "back", current="a", candidate="b")
    canary(router, "back", 0.5)
    rollback(router, "back")
    with Client(router.url, CALLER, refresh_interval=0.05) as client:
        # The live router's own resolve view, called in its process for 10,000 keys
        # (an HTTP round trip each would only add minutes); HTTP is compared below.
        arms = {"current": 0, "candidate": 0}
        for n in range(10_000):
            key = f"job-{n}"
            with app.test_request_context(f"/v1/resolve/canaried?key={key}",
                                          headers=auth(CALLER)):
                expected = resolve_role(role="canaried").get_json()
            assert _same_run_apart(client.resolve("canaried", key), expected)
            arms[expected["arm"]] += 1
        assert 2_500 < arms["candidate"] < 3_500
        for role in ("canaried", "stable", "shadowed", "full", "back"):
            for n in range(100):
                expected = router.api("GET", f"/v1/resolve/{role}?key=k{n}", CALLER)
                assert _same_run_apart(client.resolve(role, f"k{n}"), expected)
        drawn = client.resolve("stable")
        assert len(drawn["key"]) == 16 and drawn["stale"] is False


def _same_run_apart(local: Mapping[str, Any], server: Mapping[str, Any]) -> bool:
    """The SDK's answer is the server's but for the run id each minted for its own run
    (`rolegate.run_ids`: the SDK's as `run_stem` and `run_seq`); the pure function mints
    none."""
    mine = run_id_of(local)
    assert mine is not None and is_minted(mine), local
    assert run_id_of(server) != mine
    apart = ("run_id", "run_stem", "run_seq")
    return {k: v for k, v in local.items() if k not in apart} == {
        k: v for k, v in server.items() if k not in apart}


def test_unknown_role_and_long_key_are_refused(router: LiveRouter) -> None:
    """An unknown role raises NotFound and an over-long key ValueError, as the server refuses them."""
    put_role(router, "known", current="a")
    with Client(router.url, CALLER) as client:
        with pytest.raises(Exception) as caught:
            client.resolve("unknown", "k")
        assert getattr(caught.value, "status", None) == 404
        with pytest.raises(ValueError):
            client.resolve("known", "k" * 501)


def test_refresh_costs_a_304_when_nothing_changed(router: LiveRouter) -> None:
    """A refresh of an unchanged table is answered 304 and keeps the snapshot confirmed."""
    put_role(router, "r", current="a")
    # Not subscribed: the refresh thread's watch shares the spied session, and its own 200
    # (the change, taken before the test's refresh) left the test's refresh a 304 to see.
    with Client(router.url, CALLER, refresh_interval=60, subscribe=False) as client:
        generation = client.generation
        seen: list[int] = []
        original = client._api.request

        def spy(*args: Any, **kwargs: Any) -> requests.Response:
            response = original(*args, **kwargs)
            seen.append(response.status_code)
            return response

        client._api.request = spy  # type: ignore[method-assign]
        assert client.refresh() is True
        assert seen == [304] and client.generation == generation
        put_role(router, "other", current="x")
        # The router's table generation follows Redis within its refresh interval (0.05 s;
        # longer on a busy machine), answering 304 until then: refresh until it moved.
        wait_for(lambda: client.refresh() and "other" in client.roles(), timeout=15.0)
        assert seen[0] == 304 and seen[-1] == 200 and set(seen[1:-1]) <= {304}, seen


def test_router_stopped_keeps_answering_stale(router: LiveRouter) -> None:
    """With the router down resolves keep working from the snapshot and say stale."""
    put_role(router, "r", current="a", candidate="b")
    canary(router, "r", 0.5)
    with Client(router.url, CALLER, refresh_interval=0.05, max_age=None,
                subscribe=False) as client:
        before = [client.resolve("r", f"k{n}") for n in range(50)]
        assert not any(answer["stale"] for answer in before)
        router.stop()
        wait_for(lambda: client.stale)
        after = [client.resolve("r", f"k{n}") for n in range(50)]
        assert all(answer["stale"] for answer in after)
        assert [a["config"] for a in after] == [b["config"] for b in before]
        assert client.last_error
        router.start()
        wait_for(lambda: not client.stale)
        assert client.resolve("r", "k1")["stale"] is False


def test_max_age_is_enforced(router: LiveRouter) -> None:
    """A snapshot the router has not confirmed for max_age seconds raises, and recovers after."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER, refresh_interval=0.05, max_age=0.3) as client:
        assert client.resolve("r", "k")["config"] == "a"
        router.stop()

        def refused() -> bool:
            try:
                client.resolve("r", "k")
            except SnapshotTooOld as exc:
                assert "max_age=0.3s" in exc.message and exc.status == 503
                assert exc.details["age_s"] > 0.3
                return True
            return False

        wait_for(refused, timeout=3.0)
        router.start()

        def fresh() -> bool:
            try:
                return client.resolve("r", "k")["stale"] is False
            except SnapshotTooOld:
                return False  # a refresh 0.3 s late on a busy machine: not recovered yet

        wait_for(fresh, timeout=15.0)


def test_bootstrap_starts_while_the_router_is_down(router: LiveRouter, tmp_path: Path) -> None:
    """A bootstrap file or dict starts the client with the router down; the router then takes over."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as first:
        first.save(tmp_path / "bootstrap.json")
        saved = first.snapshot()
    router.api("PUT", "/v1/bindings/r", json={"current": "live"}, headers={"If-Match": "1"})
    router.stop()
    with pytest.raises(SnapshotUnavailable):
        Client(router.url, CALLER, refresh_interval=0.05)
    for bootstrap in (tmp_path / "bootstrap.json", saved):
        with Client(router.url, CALLER, refresh_interval=0.05, bootstrap=bootstrap) as client:
            answer = client.resolve("r", "k")
            assert answer["config"] == "a" and answer["stale"] is True and answer["version"] == 1
    with Client(router.url, CALLER, refresh_interval=0.05,
                bootstrap=str(tmp_path / "bootstrap.json")) as client:
        router.start()
        wait_for(lambda: not client.stale)
        answer = client.resolve("r", "k")
        assert answer["config"] == "live" and answer["version"] == 2


def test_bad_bootstrap_is_refused(router: LiveRouter, tmp_path: Path) -> None:
    """A bootstrap that is not a bindings snapshot is refused with a clear message."""
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        Client(router.url, CALLER, bootstrap=broken)
    with pytest.raises(ValueError, match="generation"):
        Client(router.url, CALLER, bootstrap={"summarizer": {"current": "a"}})


def _candidate_keys(client: Client, role: str) -> list[str]:
    keys = [f"k{n}" for n in range(200)]
    return [k for k in keys if client.resolve(role, k)["arm"] == "candidate"]


def test_rollback_is_seen_within_the_refresh_interval(router: LiveRouter) -> None:
    """After a rollback a polling client stops sending candidate traffic within its interval."""
    put_role(router, "r", current="a", candidate="b")
    canary(router, "r", 0.5)
    interval = 0.3
    with Client(router.url, CALLER, refresh_interval=interval, subscribe=False) as client:
        keys = _candidate_keys(client, "r")
        assert keys
        rollback(router, "r")
        took = wait_for(lambda: all(client.resolve("r", k)["arm"] == "current" for k in keys),
                        step=0.005)
        assert took < interval + 0.4  # one interval, plus the fetch on a loaded machine
        assert client.resolve("r", keys[0])["stage"] == "rolled_back"


def test_rollback_reaches_a_subscribed_client_under_a_second(router: LiveRouter) -> None:
    """A subscribed client sees a rollback within a second even with a long refresh interval."""
    put_role(router, "r", current="a", candidate="b")
    canary(router, "r", 0.5)
    with Client(router.url, CALLER, refresh_interval=60, subscribe=True,
                watch_timeout=2) as client:
        keys = _candidate_keys(client, "r")
        # The watch reached the router and waits there before the change.
        wait_for(lambda: notifier(router.app).waiting >= 1)
        for _ in range(2):
            started = time.monotonic()
            rollback(router, "r") if _ == 0 else canary(router, "r", 0.1)
            expected = "rolled_back" if _ == 0 else "canary"
            wait_for(lambda want=expected: client.resolve("r", keys[0])["stage"] == want,
                     step=0.002)
            assert time.monotonic() - started < 1.0
        assert client.stale is False


def test_rollback_reaches_a_default_client_under_a_second(router: LiveRouter) -> None:
    """With no options a client is subscribed: a rollback right after its fetch is in within 1 s.

    The rollback is written just after the client's first fetch: a client that
    polled every 2 s (the old default) would see it only at its next poll.
    """
    put_role(router, "r", current="a", candidate="b")
    canary(router, "r", 0.5)
    with Client(router.url, CALLER) as client:
        keys = _candidate_keys(client, "r")
        # The watch reached the router and waits there before the change.
        wait_for(lambda: notifier(router.app).waiting >= 1)
        started = time.monotonic()
        rollback(router, "r")
        wait_for(lambda: all(client.resolve("r", k)["arm"] == "current" for k in keys),
                 step=0.002)
        assert time.monotonic() - started < 1.0
        assert client.resolve("r", keys[0])["stage"] == "rolled_back"


def test_watch_answers_on_change_or_304_on_timeout(router: LiveRouter) -> None:
    """The watch endpoint answers 304 when nothing changed in time, 200 with the table at once."""
    put_role(router, "r", current="a")
    headers = auth(CALLER)
    url = f"{router.url}/v1/bindings/watch"
    with requests.Session() as http:
        current = http.get(f"{router.url}/v1/bindings", headers=headers, timeout=5).json()
        generation = current["generation"]
        started = time.monotonic()
        quiet = http.get(url, params={"generation": generation, "timeout": 0.3}, headers=headers,
                         timeout=5)
        assert quiet.status_code == 304 and quiet.headers["ETag"] == f'"g{generation}"'
        assert 0.25 < time.monotonic() - started < 2.0
        behind = http.get(url, params={"generation": generation - 1, "timeout": 5},
                          headers=headers, timeout=5)
        assert behind.status_code == 200 and behind.json() == current

        threading.Timer(0.2, put_role, (router, "other"), {"current": "x"}).start()
        started = time.monotonic()
        woken = http.get(url, params={"generation": generation, "timeout": 10}, headers=headers,
                         timeout=15)
        assert woken.status_code == 200 and "other" in woken.json()["roles"]
        assert time.monotonic() - started < 1.0
        for bad in ({"timeout": "26"}, {"timeout": "-1"}, {"timeout": "soon"},
                    {"generation": "x"}):
            refused = http.get(url, params=bad, headers=headers, timeout=5)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "bad_request"
        assert http.get(url, timeout=5).status_code == 401


def test_client_imports_without_flask() -> None:
    """rolegate.client (and the reporter and recorder) import without importing Flask."""
    code = ("import sys, rolegate.client; "
            "assert 'flask' not in sys.modules, sorted(m for m in sys.modules if 'flask' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_stage_and_share_resolves_as_routing_does() -> None:
    """Client.resolve equals rolegate.routing.resolve for each stage and many shares and keys."""
    bindings = {"stable": Binding(current="a"),
                "shadow": Binding(current="a", candidate="b", stage="shadow"),
                "full": Binding(current="a", candidate="b", stage="full", share=1.0),
                "back": Binding(current="a", candidate="b", stage="rolled_back")}
    for share in (0.0001, 0.01, 0.1, 0.5, 0.9, 0.9999):
        bindings[f"canary-{share}"] = Binding(current="a", candidate="b", stage="canary",
                                              share=share)
    roles = {role: VersionedBinding(role=role, version=n + 1, binding=binding, updated_at=0.0,
                                    updated_by="test").model_dump(mode="json")
             for n, (role, binding) in enumerate(bindings.items())}
    with Client(refused_url(), CALLER, bootstrap={"generation": 9, "roles": roles},
                refresh_interval=60) as client:
        for n, (role, binding) in enumerate(bindings.items()):
            for key in (f"{role}-{k}" for k in range(1_000)):
                assert _same_run_apart(client.resolve(role, key),
                                       resolve(role, binding, n + 1, key, stale=True))



@pytest.mark.slow
def test_subscribed_client_under_gunicorn_sees_a_rollback_under_a_second(redis_url: str) -> None:
    """Behind real gunicorn workers (forked after boot) a watch still wakes on a rollback."""
    env = base_env(REDIS_URL=redis_url, ROLEGATE_TOKENS=TOKENS, ROLEGATE_LOG_LEVEL="warning")
    with gunicorn(env, workers=2) as url, requests.Session() as http:
        http.headers.update(auth(OPERATOR))
        put = http.put(f"{url}/v1/bindings/r", json={"current": "a", "candidate": "b"}, timeout=5)
        assert put.status_code == 201, put.text
        assert http.post(f"{url}/v1/bindings/r/canary", json={"share": 0.5, "reason": "t"},
                         timeout=5).ok
        with Client(url, CALLER, refresh_interval=60, subscribe=True, watch_timeout=2) as client:
            wait_for(lambda: client.resolve("r", "k")["stage"] == "canary")
            # The watch is waiting in a worker: one worker's /metrics says so.
            wait_for(lambda: "rolegate_watches_waiting 1.0" in http.get(
                f"{url}/metrics", headers={"Connection": "close"}, timeout=5).text)
            started = time.monotonic()
            assert http.post(f"{url}/v1/bindings/r/rollback", json={"reason": "t"},
                             timeout=5).ok
            wait_for(lambda: client.resolve("r", "k")["stage"] == "rolled_back", step=0.002)
            assert time.monotonic() - started < 1.0
