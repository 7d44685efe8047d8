"""Is anyone judging: gatekeeper heartbeats on every surface (API, gate view, status, /healthz,
/metrics), stamped by Redis's clock, and the words when nobody ticks."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
import requests
from click.testing import CliRunner
from flask import Flask

from gatekeeper import heartbeat
from gatekeeper.loop import Gatekeeper
from gatekeeper.machine.vocabulary import Action
from gatekeeper.store.heartbeat import HEARTBEATS_KEY
from gatekeeper.view_model import GatekeeperView, NextView
from gatekeeper.view_model.next import annotate_next
from rolegate.http import ApiClient
from router.cli.main import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

GATE = {"thresholds": {"min_samples": 5, "min_pass_rate": 0.9, "min_stage_seconds": 0},
        "invariants": {"artifact_exists": ["out.md"]}}


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router over real HTTP, with one role whose candidate fails every run on a canary."""
    with werkzeug_server(app) as base:
        r = requests.put(f"{base}/v1/bindings/summarizer", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.5, "gate": GATE})
        assert r.status_code == 201, r.text
        yield base


def _heartbeat(url: str) -> dict:
    with requests.get(f"{url}/v1/gatekeeper/heartbeat", headers=auth(CALLER),
                      timeout=5) as answer:
        assert answer.status_code == 200, answer.text
        return answer.json()


def test_summary_states() -> None:
    """ok within a few intervals of the leader's last tick, late after, absent with none."""
    assert heartbeat.summarize([], 100.0)["status"] == heartbeat.ABSENT
    beat = {"holder": "g1", "leader": True, "interval_s": 5.0, "roles_judged": 3,
            "errors": [], "dry_run": False, "time": 100.0}
    assert heartbeat.summarize([beat], 114.0)["status"] == heartbeat.OK
    late = heartbeat.summarize([beat], 116.0)
    assert late["status"] == heartbeat.LATE and "no gatekeeper has ticked for 16 s" in late["text"]
    # A standby or a dry run judges nothing: they never make the role look attended.
    standby = {**beat, "holder": "g2", "leader": False, "time": 115.0}
    dry = {**beat, "holder": "g3", "dry_run": True, "time": 115.0}
    alone = heartbeat.summarize([standby, dry], 116.0)
    assert alone["status"] == heartbeat.ABSENT and len(alone["holders"]) == 2
    # A short interval is still given MIN_LATE_S.
    quick = {**beat, "interval_s": 0.1}
    assert heartbeat.summarize([quick], 109.0)["status"] == heartbeat.OK


def test_next_step_says_when_nobody_will_take_it() -> None:
    """A rollback that no gatekeeper will make is not 'at the next tick'."""
    nxt = NextView(action=Action.ROLLBACK, state="rolling_back",
                   summary="rolls back at the gatekeeper's next tick: x", then=None, waits=[],
                   reason="candidate fails",
                   lines=["rolls back at the gatekeeper's next tick: x"])
    absent = heartbeat.summarize([], 1.0)
    said = annotate_next(nxt, GatekeeperView.model_validate(absent))
    assert said.lines[0].startswith("would roll back now (candidate fails), but no gatekeeper")
    assert said.as_json()["unattended"] is True and "unattended" not in nxt.as_json()
    ok = heartbeat.summarize([{"holder": "g", "leader": True, "interval_s": 1, "time": 1.0}], 1.0)
    assert annotate_next(nxt, GatekeeperView.model_validate(ok)) is nxt


def test_heartbeat_api_scopes_and_bad_input(url: str) -> None:
    """Only a gatekeeper token beats; strict types; anyone with a token reads the summary."""
    body = {"holder": "g1", "leader": True, "interval_s": 5, "roles_judged": 1, "errors": []}
    with requests.post(f"{url}/v1/gatekeeper/heartbeat", json=body, headers=auth(CALLER),
                       timeout=5) as answer:
        assert answer.status_code == 403
    for bad in ({**body, "leader": "yes"}, {**body, "interval_s": "5"},
                {**body, "roles_judged": True}, {**body, "interval_s": 0}, {"holder": "g1"}):
        with requests.post(f"{url}/v1/gatekeeper/heartbeat", json=bad,
                           headers=auth(GATEKEEPER), timeout=5) as answer:
            assert answer.status_code in (400, 422), (bad, answer.text)
    assert _heartbeat(url)["status"] == "absent"
    with requests.post(f"{url}/v1/gatekeeper/heartbeat", json=body, headers=auth(GATEKEEPER),
                       timeout=5) as answer:
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ok" and answer.json()["leader"] == "g1"


def test_time_is_redis_not_the_gatekeepers(url: str, redis_url: str) -> None:
    """The stored tick time is Redis's TIME, whatever the sender's clock says."""
    body = {"holder": "g1", "leader": True, "interval_s": 5, "roles_judged": 0}
    with requests.post(f"{url}/v1/gatekeeper/heartbeat", json={**body, "time": 1e12},
                       headers=auth(GATEKEEPER), timeout=5) as answer:
        assert answer.status_code == 422  # no sender-supplied time at all
    requests.post(f"{url}/v1/gatekeeper/heartbeat", json=body, headers=auth(GATEKEEPER),
                  timeout=5).raise_for_status()
    conn = redis.Redis.from_url(redis_url)
    try:
        stored = json.loads(conn.hget(HEARTBEATS_KEY, "g1"))
        seconds, _ = conn.time()
    finally:
        conn.close()
    assert abs(stored["time"] - seconds) < 5


def test_a_running_gatekeeper_shows_everywhere(url: str) -> None:
    """Before any tick every surface says nobody judges; after one, who leads and when."""
    api = ApiClient(url, GATEKEEPER)
    keeper = Gatekeeper(api, interval=5.0, holder="gk-test")
    try:
        view = requests.get(f"{url}/v1/roles/summarizer/gate", headers=auth(CALLER),
                            timeout=5).json()
        assert view["gatekeeper"]["status"] == "absent"
        health = requests.get(f"{url}/healthz", headers=auth(CALLER), timeout=5)
        assert health.status_code == 200  # informational: never fails the router's probe
        assert health.json()["checks"]["gatekeeper"]["status"] == "absent"
        metrics = requests.get(f"{url}/metrics", timeout=5).text
        assert "rolegate_gatekeeper_up 0.0" in metrics
        assert "rolegate_gatekeeper_last_tick_timestamp_seconds" not in metrics
        env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
        out = CliRunner().invoke(main, ["status", "summarizer"], env=env).stdout
        assert "gatekeeper no gatekeeper is running" in " ".join(out.split())

        keeper.once()

        summary = _heartbeat(url)
        assert summary["status"] == "ok" and summary["leader"] == "gk-test"
        assert summary["roles_judged"] == 1 and summary["errors"] == []
        health = requests.get(f"{url}/healthz", headers=auth(CALLER), timeout=5).json()
        assert health["checks"]["gatekeeper"] == {**health["checks"]["gatekeeper"],
                                                  "ok": True, "leader": "gk-test"}
        metrics = requests.get(f"{url}/metrics", timeout=5).text
        assert "rolegate_gatekeeper_up 1.0" in metrics
        ticked = [float(line.split()[1]) for line in metrics.splitlines()
                  if line.startswith("rolegate_gatekeeper_last_tick_timestamp_seconds ")]
        assert ticked == [pytest.approx(summary["last_tick"], abs=1e-3)]
        out = CliRunner().invoke(main, ["status", "summarizer"], env=env).stdout
        assert "gatekeeper gk-test leads; last tick" in " ".join(out.split())
    finally:
        keeper.release()
        api.close()


def test_a_standby_gatekeeper_does_not_count_as_judging(url: str) -> None:
    """A second gatekeeper without the lease beats as a standby: listed, not judging."""
    api = ApiClient(url, GATEKEEPER)
    leader = Gatekeeper(api, interval=5.0, holder="lead")
    standby = Gatekeeper(api, interval=5.0, holder="wait")
    try:
        leader.acquire()
        assert standby.once() == []
        summary = _heartbeat(url)
        assert summary["status"] == "absent"
        assert [h["holder"] for h in summary["holders"]] == ["wait"]
    finally:
        leader.release()
        api.close()
