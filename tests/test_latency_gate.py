"""p95 latency gated against current (and a ceiling), read once at the stage's end.

Real router over HTTP; the gate view and decide() as the gatekeeper runs them.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
import requests
from flask import Flask

from bindings.models import Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, decide, evidence_from_view
from gatekeeper.stats.quantiles import quantile_bounds
from gatekeeper.view.latency import latency_reasons
from gatekeeper.window import WindowStats
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

ROLE = "summarizer"
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


@pytest.fixture
def router(app: Flask) -> Any:
    """The router over real HTTP with summarizer on a 0.5 canary, no minimum stage time."""
    with werkzeug_server(app) as url:
        gate = {"thresholds": {"min_samples": 50, "min_stage_seconds": 0}, "power": None}
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.5, "gate": gate})
        assert r.status_code == 201, r.text
        yield url


def _runs(url: str, slowdown: float, n: int = 400) -> None:
    """`n` runs per arm: current's latency 1 s +- 20%, the candidate's times `slowdown`."""
    rng = random.Random(7)
    batch = []
    for arm, config, factor in (("current", "cfg_a", 1.0), ("candidate", "cfg_b", slowdown)):
        batch += [{"run_id": f"{arm}-{i}", "role": ROLE, "arm": arm, "config": config,
                   "key": f"{arm}-{i}", "tools": ["read"], "stamps": STAMPS,
                   "latency_s": round(factor * rng.uniform(0.8, 1.2), 3)} for i in range(n)]
    for start in range(0, len(batch), 400):
        r = requests.post(f"{url}/v1/traces", json={"traces": batch[start:start + 400]},
                          headers=auth(CALLER), timeout=10)
        assert r.status_code == 200, r.text


def _decision(url: str) -> Any:
    view = requests.get(f"{url}/v1/roles/{ROLE}/gate", headers=auth(GATEKEEPER), timeout=10).json()
    body = requests.get(f"{url}/v1/bindings/{ROLE}", headers=auth(CALLER), timeout=5).json()
    record = VersionedBinding.model_validate(body)
    return view, decide(ROLE, record, evidence_from_view(view), time.time())


def test_a_candidate_50_percent_slower_at_p95_is_rolled_back(router: str) -> None:
    """+50% latency: the candidate arm fails on p95_latency and the stage's look rolls back."""
    _runs(router, 1.5)
    view, decision = _decision(router)
    codes = [r["code"] for r in view["arms"]["candidate"]["reasons"]]
    assert "p95_latency" in codes and view["arms"]["candidate"]["p95_latency_s"] > 1.6
    assert decision.action is Action.ROLLBACK and "p95 latency" in decision.reason


def test_a_candidate_5_percent_slower_is_not(router: str) -> None:
    """+5% latency is inside the +20% line: no latency reason, the stage advances."""
    _runs(router, 1.05)
    view, decision = _decision(router)
    assert view["arms"]["candidate"]["reasons"] == []
    assert decision.action is Action.ADVANCE, decision


def test_quantile_bounds_bracket_the_p95_and_the_ceiling_fails_a_slow_arm() -> None:
    """The order-statistic bounds hold the true p95; a ceiling under it fails the arm."""
    values = {round(0.01 * i, 2): 1 for i in range(1, 1001)}  # 0.01..10.00, p95 = 9.5
    low, high = quantile_bounds(values, 0.95, 0.001)
    assert low is not None and high is not None and low < 9.5 < high
    slow = WindowStats({f"lat:{ms}": 1 for ms in range(1000, 2000, 5)} | {"n": 200})
    fast = WindowStats({f"lat:{ms}": 1 for ms in range(1000, 1200)} | {"n": 200})
    ceiling = Thresholds(p95_latency_ceiling_s=1.5, max_p95_latency_increase=None)
    assert [r.code for r in latency_reasons(slow, fast, ceiling, Stage.CANARY)] == [
        "p95_latency"]
    assert latency_reasons(fast, fast, ceiling, Stage.CANARY) == []
