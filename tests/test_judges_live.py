"""Online judges through the real router, ingest, queue, gatekeeper and a loopback judge.

A candidate whose answers stop following `instruction:tone` ("never promise a
date") on 40% of its judged runs is rolled back naming the key; a healthy one
is promoted; a judge that answers 500, garbage or too slowly leaves ingest and
the gate as they were (errors counted and shown); the day's budget stops the
sampling and says so; the verdicts are stored with the trace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from gatekeeper.judging import Judges, judge_tick
from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action
from rolegate.http import ApiClient
from router.cli import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.judge_server import JudgeServer, judge_server
from tests.servers import werkzeug_server

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "refunds"
STAMPS = {"agent_version": "1", "instruction_hash": "sha256:secret-prompt-hash",
          "model_id": "m", "tool_schema_hash": "t"}
KEY_ENV = "ROLEGATE_TEST_JUDGE_KEY"
SECRET = "judge-secret-123"


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


def _put(url: str, path: str, body: dict[str, Any]) -> None:
    with requests.put(f"{url}{path}", json=body, headers=auth(OPERATOR), timeout=5) as r:
        assert r.status_code in (200, 201), r.text


def setup(url: str, judge: JudgeServer, **policy: Any) -> None:
    """refunds on refunds_v1, refunds_v2 in shadow; the example spec; a judge on every run."""
    spec = json.loads((EXAMPLE / "spec.json").read_text())
    for config in ("refunds_v1", "refunds_v2"):
        _put(url, f"/v1/configs/{config}", {"spec": spec})
    # A generous timeout: on a loaded machine a healthy judge's answer may take over a
    # second, and a timed-out ask is asked again (the counts below would be off by one).
    gate = {"thresholds": {"min_samples": 20, "min_stage_seconds": 0.0}, "power": None,
            "judge": {"url": judge.url, "model": "judge-1", "sample_rate": 1.0,
                      "api_key_env": KEY_ENV, "timeout_s": 30.0, **policy}}
    _put(url, "/v1/bindings/refunds", {"current": "refunds_v1", "candidate": "refunds_v2",
                                       "stage": "shadow", "gate": gate})


def run(run_id: str, arm: str, job: int, promise: bool) -> dict[str, Any]:
    """A refunds run; `promise` makes its answer promise a date (against instruction:tone)."""
    note = "We promise it by Friday." if promise else "Thank you for your patience."
    return {"run_id": run_id, "role": "refunds", "arm": arm,
            "config": "refunds_v1" if arm == "current" else "refunds_v2",
            "key": f"order-{job}", "tools": ["lookupOrder"], "stamps": STAMPS,
            "input": {"order": f"o-{job}", "amount": 300.0},
            "output_text": json.dumps({"decision": "refund", "customer": {"id": f"c{job}"},
                                       "note": note})}


def report(url: str, jobs: range, promise_share: float) -> None:
    """Each job on current (polite) and on the shadow (promising on `promise_share` of jobs)."""
    cut = round(promise_share * 10)
    for job in jobs:
        for arm, promise in (("current", False), ("shadow", job % 10 < cut)):
            trace = run(f"{arm[0]}{job}", arm, job, promise)
            # One trace per POST, as agents report: the ingest fast path samples them.
            with requests.post(f"{url}/v1/traces", json=trace, headers=auth(CALLER),
                               timeout=10) as r:
                assert r.status_code == 200, r.text


def judge_all(api: ApiClient) -> int:
    """Judge every queued run (a few batches)."""
    return judge_tick(api, time.time(), Judges(environ={KEY_ENV: SECRET}), rounds=50)


def test_candidate_breaking_the_tone_instruction_is_rolled_back_naming_it(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """40% of the candidate's judged runs promise a date: rolled back on instruction:tone."""
    setup(live, judge)
    report(live, range(60), 0.4)
    assert judge_all(api) == 120
    assert all(h.get("Authorization") == f"Bearer {SECRET}" for h in judge.headers)
    sent = json.dumps(judge.requests)
    # Eval isolation: input and output only, never the config, stamps or run id.
    assert "sha256:secret-prompt-hash" not in sent and "refunds_v2" not in sent
    assert '"s0"' not in sent
    view = api.get("/v1/roles/refunds/gate")
    tone = view["judges"]["arms"]["shadow"]["instruction:tone"]
    assert tone == {"passed": 36, "failed": 24}
    assert view["judges"]["day"]["judged"] == 120 and view["judges"]["day"]["errors"] == 0
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ROLLBACK, decision.reason
    assert decision.reason.startswith("criterion instruction:tone: judged: failed 24 of 60")
    stored = api.get("/v1/traces/s0?role=refunds")
    assert stored["judge"]["criteria"]["instruction:tone"] == {"pass": False,
                                                              "reason": "promises a date"}


def test_healthy_candidate_is_promoted_with_the_judge_on(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """Same traffic, no broken promise: every judged key holds, shadow passes."""
    setup(live, judge)
    report(live, range(60), 0.0)
    assert judge_all(api) == 120
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ADVANCE, decision.reason


@pytest.mark.parametrize("mode", ["500", "garbage", "slow"])
def test_a_broken_judge_changes_neither_ingest_nor_the_gate(
        live: str, api: ApiClient, judge: JudgeServer, mode: str) -> None:
    """Down, garbage or slow: every trace accepted, errors counted and shown, shadow still passes."""
    judge.mode, judge.delay = mode, 1.5
    setup(live, judge, timeout_s=1.0)  # the slow judge's 1.5 s always times out
    report(live, range(30), 0.0)
    judge_tick(api, time.time(), Judges(environ={KEY_ENV: SECRET}), rounds=2)
    view = api.get("/v1/roles/refunds/gate")
    day = view["judges"]["day"]
    assert view["arms"]["shadow"]["n"] == 30 and view["arms"]["current"]["n"] == 30
    assert day["errors"] >= 1 and day["judged"] == 0 and day["last_error"]
    assert view["judges"]["arms"] == {}
    (decision,) = tick(api, time.time())
    assert decision.action is Action.ADVANCE, decision.reason
    status = CliRunner().invoke(main, ["status", "refunds", "--url", live, "--token", OPERATOR])
    assert "judge      judge-1:" in status.output and "errors" in status.output


def test_the_days_budget_stops_sampling_and_says_so(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """10 calls a day: 10 runs judged, later runs skipped as over budget, the view says so."""
    setup(live, judge, max_calls_per_day=10)
    report(live, range(15), 0.0)
    assert judge_all(api) == 10
    report(live, range(15, 20), 0.0)
    view = api.get("/v1/roles/refunds/gate")
    day = view["judges"]["day"]
    assert day["calls"] == 10 and day["judged"] == 10
    assert day["skipped_budget"] == 10 and day["queued"] == 30
    assert view["judges"]["budget"]["exhausted"] == ["calls"]
    assert "budget is spent" in view["judges"]["budget"]["message"]
    metrics = requests.get(f"{live}/metrics", headers=auth(OPERATOR), timeout=5).text
    assert 'rolegate_judge_runs_total{outcome="skipped_budget",role="refunds"} 10.0' in metrics
    page = requests.get(f"{live}/ui/roles/refunds", headers=auth(OPERATOR), timeout=10)
    assert page.status_code == 200 and 'id="judges"' in page.text
    assert "budget is spent (calls)" in page.text


def test_min_judged_holds_promotion_while_the_budget_is_spent(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """A policy that requires judged evidence holds the stage, naming the budget."""
    setup(live, judge, max_calls_per_day=4, min_judged=20)
    report(live, range(30), 0.0)
    judge_all(api)
    (decision,) = tick(api, time.time())
    assert decision.action is Action.HOLD
    assert decision.reason.startswith("waiting for judged evidence:")
    assert "budget is spent" in decision.reason


def test_a_judge_disagreeing_with_itself_is_held_at_observed(
        live: str, api: ApiClient, judge: JudgeServer) -> None:
    """Asked twice, a flaky judge's tone verdicts disagree: under min_agreement the key only shows."""
    judge.mode = "flaky"
    setup(live, judge, repeat_rate=1.0, min_agreement=0.9, min_agreement_runs=10)
    report(live, range(40), 0.4)
    assert judge_all(api) == 80
    view = api.get("/v1/roles/refunds/gate")
    agreement = view["judges"]["agreement"]["self"]
    assert agreement["instruction:tone"]["n"] == 80 and agreement["instruction:tone"]["rate"] < 0.9
    assert agreement["instruction:no-partial"]["rate"] == 1.0
    keys = {k["key"]: k for k in view["by_criterion"]["gate"]["shadow"]}
    tone = keys["instruction:tone"]
    assert tone["mode"] == "observed" and tone["acts"] is False
    assert tone["held"].startswith("observed until the judge agrees on it 90%")
    assert keys["instruction:no-partial"]["mode"] == "gated"
    (decision,) = tick(api, time.time())
    assert "instruction:tone" not in decision.reason


def test_human_feedback_measures_the_judge(live: str, api: ApiClient,
                                           judge: JudgeServer) -> None:
    """Positive feedback on judged runs counts as agreement on every key the judge passed."""
    setup(live, judge)
    report(live, range(4), 0.0)
    judge_all(api)
    for run_id in ("c0", "c1", "c2"):
        with requests.post(f"{live}/v1/traces/{run_id}/feedback", headers=auth(OPERATOR),
                           json={"tier": "positive", "role": "refunds"}, timeout=5) as r:
            assert r.status_code == 201, r.text
    human = api.get("/v1/roles/refunds/gate")["judges"]["agreement"]["human"]
    assert human["instruction:tone"] == {"agree": 3, "disagree": 0, "n": 3, "rate": 1.0}
