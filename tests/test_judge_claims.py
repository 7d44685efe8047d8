"""Judging is at-least-once and only for real runs (issue 33, rows 7 and 8).

A verdict is recorded only for a claim the router still holds, for the run,
arm and config it was handed out with: anything else is refused whole (409, or
422 without a claim), naming why, and nothing is written. A claim has a
deadline (its lease): one whose verdict never came goes back to the queue and
its call is refunded, so the real gatekeeper's judging (`judge_tick`, with a
loopback judge) judges it later instead of losing it and paying for it.
"""

from __future__ import annotations

import time
from typing import Any

import requests
from flask import Flask

from gatekeeper.judging import report_verdicts
from gatekeeper.store.judging import DEADLINES_KEY_TEMPLATE, JudgeStore
from tests.conftest import GATEKEEPER, auth
from tests.judge_server import JudgeServer
from tests.servers import wait_for
from tests.test_judges_live import api, judge, judge_all, live, report, setup  # noqa: F401

ROLE = "refunds"


def _claim(url: str, max_: int, **extra: Any) -> list[dict[str, Any]]:
    r = requests.post(f"{url}/v1/roles/{ROLE}/judge/claim", json={"max": max_, **extra},
                      headers=auth(GATEKEEPER), timeout=5)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


def _verdict(item: dict[str, Any], **changed: Any) -> dict[str, Any]:
    """What the gatekeeper reports for a judged item: every criterion passed."""
    result = {k: item[k] for k in ("claim", "run_id", "reporter", "arm", "config", "epoch")}
    result["verdicts"] = {c["key"]: {"pass": True, "reason": "fine"} for c in item["criteria"]}
    return {**result, "tokens": 10, **changed}


def _post(url: str, *results: dict[str, Any]) -> requests.Response:
    return requests.post(f"{url}/v1/roles/{ROLE}/judge/verdicts", json={"results": results},
                         headers=auth(GATEKEEPER), timeout=5)


def _day(app: Flask) -> dict[str, Any]:
    return JudgeStore(app.extensions["rolegate"].redis).day(ROLE, time.time())


def _judged(url: str, run_id: str) -> bool:
    """Whether the stored run carries the online judge's verdicts."""
    r = requests.get(f"{url}/v1/traces/{run_id}?role={ROLE}", headers=auth(GATEKEEPER),
                     timeout=5)
    assert r.status_code == 200, r.text
    return "judge" in r.json()


def _nothing_recorded(app: Flask, url: str, run_id: str) -> None:
    day = _day(app)
    assert day["judged"] == 0 and day["tokens"] == 0 and day["errors"] == 0, day
    assert not _judged(url, run_id)


def test_a_verdict_for_a_run_never_claimed_or_not_stored_is_refused(
        app: Flask, live: str, judge: JudgeServer) -> None:
    """Row 7: a made-up run id, and a stored run that was only queued (never claimed): 409
    not_claimed, nothing recorded; a result without a claim is a 422 naming it."""
    setup(live, judge)
    report(live, range(2), 0.0)  # 4 runs queued, none claimed
    made_up = {"claim": "c-1", "run_id": "no-such-run", "reporter": None, "arm": "shadow",
               "config": "refunds_v2", "epoch": "0",
               "verdicts": {"instruction:tone": {"pass": False}}}
    r = _post(live, made_up)
    assert r.status_code == 409, r.text
    refused = r.json()["error"]["details"]["refused"]
    assert refused[0]["why"] == "not_claimed" and refused[0]["run_id"] == "no-such-run"
    assert "not held" in r.json()["error"]["message"]
    queued = {**made_up, "run_id": "s0"}
    assert _post(live, queued).status_code == 409
    no_claim = {k: v for k, v in made_up.items() if k != "claim"}
    r = _post(live, no_claim)
    assert r.status_code == 422 and "claim" in r.json()["error"]["message"], r.text
    _nothing_recorded(app, live, "s0")
    assert _day(app)["waiting"] == 4


def test_a_verdict_must_answer_its_own_claim_and_only_once(
        app: Flask, live: str, judge: JudgeServer) -> None:
    """Row 7: a claimed run answered for another arm, config or run is refused whole (the
    good result beside it is not recorded either); its own verdict is accepted once."""
    setup(live, judge)
    report(live, range(1), 0.0)
    items = _claim(live, 2)
    assert len(items) == 2 and all(item["claim"] for item in items)
    first, second = items
    for bad in ({"arm": "current" if first["arm"] != "current" else "shadow"},
                {"config": "refunds_v9"}, {"run_id": second["run_id"]}):
        r = _post(live, _verdict(second), _verdict(first, **bad))
        assert r.status_code == 409, r.text
        refused = r.json()["error"]["details"]["refused"]
        assert [x["why"] for x in refused] == ["claim_mismatch"], refused
        assert refused[0]["index"] == 1 and next(iter(bad)) in refused[0]["message"]
    assert _day(app)["judged"] == 0 and _day(app)["claimed"] == 2
    r = _post(live, _verdict(first), _verdict(second))
    assert r.status_code == 200 and r.json() == {"judged": 2, "errors": 0}, r.text
    again = _post(live, _verdict(first))
    assert again.status_code == 409 and "not held" in again.text
    day = _day(app)
    assert day["judged"] == 2 and day["claimed"] == 0 and day["calls"] == 2, day


def test_a_claim_whose_verdict_never_came_is_judged_later_and_paid_once(
        app: Flask, live: str, api: Any, judge: JudgeServer) -> None:
    """Row 8: the day allows 4 calls; a gatekeeper claims all 4 runs and dies before its
    verdicts. After the claim's deadline the runs go back to the queue with their calls
    refunded, and the real gatekeeper's judging judges all 4 within the same budget."""
    setup(live, judge, max_calls_per_day=4)
    report(live, range(2), 0.0)
    lost = _claim(live, 4, lease_s=1)
    assert len(lost) == 4 and _day(app)["calls"] == 4
    redis = app.extensions["rolegate"].redis
    key = DEADLINES_KEY_TEMPLATE.format(role=ROLE)
    wait_for(lambda: redis.zrangebyscore(key, "-inf", time.time()), 10,
             "the dead gatekeeper's claims to pass their deadline")
    assert judge_all(api) == 4
    day = _day(app)
    assert day["judged"] == 4 and day["calls"] == 4 and day["requeued"] == 4, day
    assert day["claimed"] == 0 and day["waiting"] == 0
    assert all(_judged(live, run_id) for run_id in ("c0", "s0", "c1", "s1"))
    # A late verdict from the dead gatekeeper's claim is refused: the run was judged anew.
    r = _post(live, _verdict(lost[0]))
    assert r.status_code == 409 and r.json()["error"]["details"]["refused"][0]["why"] == \
        "not_claimed"
    assert _day(app)["judged"] == 4


def test_the_gatekeeper_reports_again_without_a_claim_it_no_longer_holds(
        app: Flask, live: str, api: Any, judge: JudgeServer) -> None:
    """One result of a batch answers a claim that went back to the queue: the router refuses
    the batch, the gatekeeper posts the rest again, and only the stale one waits to be
    judged anew."""
    setup(live, judge)
    report(live, range(1), 0.0)
    first, second = _claim(live, 2, lease_s=1)
    redis = app.extensions["rolegate"].redis
    key = DEADLINES_KEY_TEMPLATE.format(role=ROLE)
    wait_for(lambda: redis.zrangebyscore(key, "-inf", time.time()), 10,
             "the claims to pass their deadline")
    again = _claim(live, 1)  # the next claim sends both back and takes one of them anew
    assert len(again) == 1
    fresh = again[0]
    old = second if fresh["run_id"] == first["run_id"] else first
    recorded = report_verdicts(api, f"/v1/roles/{ROLE}/judge/verdicts",
                               [_verdict(old), _verdict(fresh)])
    assert recorded == 1
    day = _day(app)
    assert day["judged"] == 1 and day["waiting"] == 1 and day["claimed"] == 0, day
    assert _judged(live, fresh["run_id"]) and not _judged(live, old["run_id"])
