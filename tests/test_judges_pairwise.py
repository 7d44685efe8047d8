"""Blind pairwise in shadow, through the real router, ingest, queue, gatekeeper and a loopback judge.

Both arms of a sampled shadow job are asked together (the blind pairwise prompt), in a
random order and unnamed; the judge's winner is a flip for the paired test.
A candidate the judge prefers current over is rolled back naming the pairwise
judge; a healthy one is promoted; `regression_detected` on a pair asked about a
safety-tagged criterion fails shadow at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from gatekeeper.judging import Judges, judge_tick
from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action
from rolegate.http import ApiClient
from tests.conftest import CALLER, GATEKEEPER, auth
from tests.judge_server import JudgeServer, judge_server
from tests.servers import werkzeug_server
from tests.test_judges_live import KEY_ENV, SECRET, run, setup


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    """The loopback judge."""
    with judge_server() as server:
        yield server


@pytest.fixture
def api(live: str) -> Iterator[ApiClient]:
    """A gatekeeper-scope client."""
    client = ApiClient(live, GATEKEEPER, attempts=2)
    yield client
    client.close()


def report(url: str, jobs: range, unhelpful: set[int], better: set[int] = frozenset()) -> None:
    """Each job on current and on the shadow; the shadow says "we cannot help" on `unhelpful`
    jobs (the criteria judge does not mind; the pairwise judge prefers current), current
    does on `better` jobs (the candidate wins those)."""
    for job in jobs:
        for arm in ("current", "shadow"):
            trace = run(f"{arm[0]}{job}", arm, job, False)
            bad = unhelpful if arm == "shadow" else better
            if job in bad:
                trace["output_text"] = json.dumps({"decision": "deny",
                                                   "customer": {"id": f"c{job}"},
                                                   "note": "We cannot help with that."})
            with requests.post(f"{url}/v1/traces", json=trace, headers=auth(CALLER),
                               timeout=10) as r:
                assert r.status_code == 200, r.text


def judge_all(api: ApiClient) -> int:
    """Judge every queued run and pair (a few batches)."""
    return judge_tick(api, time.time(), Judges(environ={KEY_ENV: SECRET}), rounds=50)


def pairwise_asks(judge: JudgeServer) -> list[dict[str, Any]]:
    """The pairwise requests the judge got."""
    return [r for r in judge.requests
            if r["messages"][0]["content"].startswith("You are an expert")]


def test_a_candidate_the_pairwise_judge_prefers_current_over_is_rolled_back(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """Shadow loses 20 of 40 blind pairs and wins none: rolled back in shadow, naming the judge."""
    setup(live, judge, pairwise=1.0)
    report(live, range(40), unhelpful=set(range(0, 40, 2)))
    assert judge_all(api) == 80 + 40
    asks = pairwise_asks(judge)
    assert len(asks) == 40
    sent = json.dumps(asks)
    # Blind: neither config, arm nor run id is shown, only A and B.
    for word in ("refunds_v1", "refunds_v2", "shadow", "current", '"s0"', '"c0"'):
        assert word not in sent, word
    view = api.get("/v1/roles/refunds/gate")
    pairs = view["judges"]["pairwise"]
    assert (pairs["pairs"], pairs["regressions"], pairs["improvements"], pairs["ties"]) == (
        40, 20, 0, 20)
    assert pairs["test"]["reject"] is True and pairs["failure"]
    # The criteria judge saw nothing wrong: the pairwise judge is what fails the candidate.
    tone = view["judges"]["arms"]["shadow"]["instruction:tone"]
    assert tone == {"passed": 40, "failed": 0}
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ROLLBACK, decision.reason
    assert decision.stage == "shadow"
    assert "pairwise judge judge-1: the candidate lost 20 of 40 judged shadow pairs and won 0" \
        in decision.reason
    # The verdict is stored with both runs of the pair, and says which side was shown first.
    shadow, current = (api.get(f"/v1/traces/{r}?role=refunds")["judge"]["pairwise"]
                       for r in ("s0", "c0"))
    assert shadow == current and shadow["winner"] == "BASELINE"
    assert isinstance(shadow["swapped"], bool)
    swaps = {api.get(f"/v1/traces/s{j}?role=refunds")["judge"]["pairwise"]["swapped"]
             for j in range(40)}
    assert swaps == {True, False}


def test_a_healthy_candidate_is_promoted_with_pairwise_on(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """The shadow wins some pairs and ties the rest: shadow passes."""
    setup(live, judge, pairwise=1.0)
    report(live, range(40), unhelpful=set(), better={1, 5, 9})
    judge_all(api)
    pairs = api.get("/v1/roles/refunds/gate")["judges"]["pairwise"]
    assert (pairs["regressions"], pairs["improvements"], pairs["ties"]) == (0, 3, 37)
    assert pairs["failure"] is None
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ADVANCE, decision.reason


def test_one_regression_is_not_enough_without_a_safety_tag(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """One lost pair among 30 does not reject the flip test: shadow passes."""
    setup(live, judge, pairwise=1.0)
    report(live, range(30), unhelpful={3})
    judge_all(api)
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ADVANCE, decision.reason


def test_a_regression_on_a_safety_tagged_criterion_blocks_at_once(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """The same one lost pair, asked with a safety-tagged criterion: rolled back, naming it."""
    setup(live, judge, pairwise=1.0, safety_criteria=["instruction:no-partial"])
    report(live, range(30), unhelpful={3})
    judge_all(api)
    pairs = api.get("/v1/roles/refunds/gate")["judges"]["pairwise"]
    assert pairs["safety_regressions"] == 1
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ROLLBACK, decision.reason
    assert "pairwise judge judge-1: regression detected on a safety-tagged criterion" \
        in decision.reason


def test_pairwise_off_asks_no_pairs(live: str, api: ApiClient, judge: JudgeServer) -> None:
    """Without `pairwise` the judge is asked criteria only, and the view has no pairwise."""
    setup(live, judge)
    report(live, range(10), unhelpful=set(range(10)))
    assert judge_all(api) == 20
    assert pairwise_asks(judge) == []
    assert "pairwise" not in api.get("/v1/roles/refunds/gate")["judges"]


def test_a_bad_pairwise_verdict_is_a_4xx(live: str) -> None:
    """A pairwise result whose winner is not BASELINE, CANDIDATE or TIE is refused, by name."""
    setup_body = {"results": [{"run_id": "pair:k", "arm": "shadow", "config": "c", "epoch": "e",
                               "pair": {"shadow": {"run_id": "s"}, "current": {"run_id": "c"}},
                               "pairwise": {"winner": "A", "score_delta": 0.0,
                                            "regression_detected": False, "swapped": False}}]}
    with requests.post(f"{live}/v1/roles/refunds/judge/verdicts", json=setup_body,
                       headers=auth(GATEKEEPER), timeout=5) as r:
        assert 400 <= r.status_code < 500 and "winner" in r.text, r.text
