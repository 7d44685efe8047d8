"""Exposures carry their reporter: nothing a caller token sends can mask a rollback or cause one.

Issue 33, rows 5 and 6. Each assignment count is stamped with the token that
sent it (POST /v1/exposures, the SDK's in-process resolves) or that resolved
(GET /v1/resolve, OFREP): never a body field. The gate view's `reports`
section sets each reporter's assignments against that reporter's own reports,
so a token counting runs it never reports is short on its own (`both_short`:
hold and alert, never hiding the rate tests), its missing runs are not
counted as failed, and with `trusted_reporters` its counts are not read.

Everything goes through the real router (exposures and traces over HTTP, the
gate view over HTTP) and decide() or a real Gatekeeper reading it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from gatekeeper.machine.decide import Action
from gatekeeper.stats.reports import BOTH_SHORT, SHORT
from gatekeeper.store.exposures import ExposureStore
from rolegate import Client
from rolegate.exposures import BUCKET_S, epoch_of
from router.app import create_app
from tests.conftest import OPERATOR, TOKENS, auth
from tests.gatekeeping import binding, keeper, tick_until
from tests.reporting import STAMPS, decide_now, record, reported_at_once
from tests.servers import werkzeug_server

ROLE = "summarizer"
FLEET = "fleet-secret"
MALLORY = "mallory-secret"
BUCKETS = 8


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """The router with two more caller tokens: the agents' (`fleet`) and an attacker's."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},fleet={FLEET}:caller,mallory={MALLORY}:caller"})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _router(app: Flask, **gate: Any) -> Iterator[str]:
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1,
                               "gate": {"thresholds": {"min_samples": 10}, **gate}})
        assert r.status_code == 201, r.text
        yield url


@pytest.fixture(autouse=True)
def _reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs here are posted 10 minutes after they started: taken as reported at once."""
    reported_at_once(monkeypatch)


@pytest.fixture
def router(app: Flask) -> Iterator[str]:
    """summarizer on a 0.1 canary, every reporter counting (no trusted_reporters)."""
    yield from _router(app)


def _buckets() -> range:
    first = int((time.time() - 600) // BUCKET_S) - BUCKETS
    return range(first, first + BUCKETS)


def _expose(url: str, token: str, arm: str, per_bucket: int) -> None:
    """`token` posts `per_bucket` assignments of `arm` in each bucket, 10 minutes back."""
    epoch = epoch_of(record(url, ROLE).binding.stage_since)
    config = "cfg_b" if arm == "candidate" else "cfg_a"
    rows = [{"role": ROLE, "config": config, "arm": arm, "epoch": epoch, "bucket": b,
             "count": per_bucket} for b in _buckets()]
    r = requests.post(f"{url}/v1/exposures", json={"exposures": rows}, headers=auth(token),
                      timeout=5)
    assert r.status_code == 200, r.text


def _report(url: str, token: str, arm: str, per_bucket: int, failed: int = 0) -> None:
    """`token` reports `per_bucket` runs of `arm` in each bucket, `failed` of them failed."""
    config = "cfg_b" if arm == "candidate" else "cfg_a"
    traces = [{"run_id": f"{arm}-{b}-{i}", "role": ROLE, "arm": arm, "config": config,
               "key": f"{arm}-{b}-{i}", "tools": ["read"], "stamps": STAMPS,
               "time": b * BUCKET_S + 5.0, "latency_s": 2.0, "answered": i >= failed}
              for b in _buckets() for i in range(per_bucket)]
    for start in range(0, len(traces), 500):
        r = requests.post(f"{url}/v1/traces", json={"traces": traces[start:start + 500]},
                          headers=auth(token), timeout=10)
        assert r.status_code == 200, r.text


def _fleet(url: str, cand: tuple[int, int, int], cur: tuple[int, int, int]) -> None:
    """The agents' own counts: per bucket and arm (assigned, reported, failed among them)."""
    for arm, (assigned, reported, failed) in (("candidate", cand), ("current", cur)):
        _expose(url, FLEET, arm, assigned)
        _report(url, FLEET, arm, reported, failed)


def test_forged_current_exposures_do_not_hide_a_candidate_losing_its_runs(
        router: str) -> None:
    """Row 5: 31% of the candidate's runs never report; mallory posts +2,000 current
    exposures. The report test is read before both_short: the real gatekeeper rolls back."""
    _fleet(router, (13, 9, 0), (90, 90, 0))
    _expose(router, MALLORY, "current", 250)
    view, _ = decide_now(router, ROLE)
    reports = view["reports"]
    assert reports["verdict"] == SHORT, reports
    assert reports["by_reporter"]["mallory"]["short"] is True
    assert reports["by_reporter"]["mallory"]["assigned"]["current"] == 2000
    assert reports["by_reporter"]["fleet"]["counted"] is True
    assert reports["missing_runs"]["counted_reporters"] == ["fleet"]
    # mallory's 2,000 never-reported current runs are not failed runs of current.
    assert view["concurrent"]["missing"]["current"] == 0, view["concurrent"]["missing"]
    with keeper(router, "forged-current") as gatekeeper:
        tick_until(gatekeeper, lambda: binding(router, ROLE)["stage"] == "rolled_back",
                   "the candidate losing its runs to be rolled back")


def test_forged_current_exposures_do_not_mask_a_failing_candidate(router: str) -> None:
    """Row 5: the candidate fails 6% of its runs, current 0.4%; mallory's +2,000 current
    exposures (never reported) add no failed current run: rolled back, mallory named."""
    _fleet(router, (50, 50, 3), (450, 450, 2))
    _expose(router, MALLORY, "current", 250)
    view, decision = decide_now(router, ROLE)
    failure = view["concurrent"]["metrics"]["run_failure"]
    assert failure["current"] == {"n": 3600, "events": 16}, failure
    assert view["reports"]["verdict"] == BOTH_SHORT
    assert "mallory reported 0 of its 2000 current runs" in view["reports"]["reason"]
    assert decision.action is Action.ROLLBACK, decision
    assert decision.details["response"]["rule"] in ("drift", "sequential"), decision.details


@pytest.mark.parametrize("trusted", [None, ["fleet"]])
def test_forged_candidate_exposures_do_not_roll_back_a_healthy_candidate(
        app: Flask, trusted: list[str] | None) -> None:
    """Row 6: every fleet run reports and passes; mallory posts 60 candidate exposures.
    Judged against mallory's own (absent) reports they are no evidence: no rollback; under
    `trusted_reporters` they are not even read."""
    for url in _router(app, trusted_reporters=trusted):
        _fleet(url, (10, 10, 0), (90, 90, 0))
        _expose(url, MALLORY, "candidate", 8)  # 64 over the stage
        view, decision = decide_now(url, ROLE)
        reports = view["reports"]
        assert reports["verdict"] not in (SHORT, BOTH_SHORT), reports
        assert view["concurrent"]["missing"]["candidate"] == 0
        assert decision.action is not Action.ROLLBACK, decision
        if trusted is None:
            assert reports["by_reporter"]["mallory"] == {
                "assigned": {"candidate": 64, "current": 0},
                "reported": {"candidate": 0, "current": 0}, "short": False, "counted": False}
        else:
            assert set(reports["by_reporter"]) == {"fleet"}


def test_every_count_carries_the_token_that_sent_or_resolved_it(app: Flask,
                                                                 router: str) -> None:
    """HTTP resolves and OFREP evaluations are counted under the resolving token, an SDK's
    in-process resolves under the SDK's token; a body cannot name a reporter (422)."""
    for n in range(20):
        r = requests.get(f"{router}/v1/resolve/{ROLE}?key=m-{n}", headers=auth(MALLORY),
                         timeout=5)
        assert r.status_code == 200
        r = requests.post(f"{router}/ofrep/v1/evaluate/flags/{ROLE}", headers=auth(FLEET),
                          json={"context": {"targetingKey": f"f-{n}"}}, timeout=5)
        assert r.status_code == 200
    sdk = Client(router, FLEET, refresh_interval=0.1)
    for n in range(30):
        sdk.resolve(ROLE, f"sdk-{n}")
    sdk.close()
    app.extensions["rolegate_exposures"].flush()
    epoch = epoch_of(record(router, ROLE).binding.stage_since)
    store = ExposureStore(app.extensions["rolegate"].redis)
    counted: dict[str, int] = {}
    for arm, config in (("current", "cfg_a"), ("candidate", "cfg_b")):
        for name, buckets in store.by_reporter(ROLE, config, arm, epoch).items():
            counted[name] = counted.get(name, 0) + sum(buckets.values())
    assert counted == {"mallory": 20, "fleet": 50}, counted
    row = {"role": ROLE, "config": "cfg_a", "arm": "current", "epoch": epoch, "bucket": 1,
           "count": 5, "reporter": "fleet"}
    r = requests.post(f"{router}/v1/exposures", json={"exposures": [row]},
                      headers=auth(MALLORY), timeout=5)
    assert r.status_code == 422 and "reporter" in r.json()["error"]["message"], r.text
