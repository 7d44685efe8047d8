"""p95 steps gated with order-statistic bounds against a ceiling and current, at one look.

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
from gatekeeper.view.steps import step_reasons
from gatekeeper.window import WindowStats
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

ROLE = "summarizer"
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


@pytest.fixture
def router(app: Flask) -> Any:
    """The router over real HTTP: a 0.5 canary, steps compared with current (+20%)."""
    with werkzeug_server(app) as url:
        gate = {"thresholds": {"min_samples": 50, "min_stage_seconds": 0,
                               "max_p95_steps_increase": 0.2}, "power": None}
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.5, "gate": gate})
        assert r.status_code == 201, r.text
        yield url


def _runs(url: str, extra: int, n: int = 400) -> None:
    """`n` runs per arm: current takes 2-6 steps; the candidate `extra` more."""
    rng = random.Random(11)
    batch = []
    for arm, config, more in (("current", "cfg_a", 0), ("candidate", "cfg_b", extra)):
        batch += [{"run_id": f"{arm}-{i}", "role": ROLE, "arm": arm, "config": config,
                   "key": f"{arm}-{i}", "tools": ["read"], "stamps": STAMPS,
                   "step_count": rng.randint(2, 6) + more} for i in range(n)]
    for start in range(0, len(batch), 400):
        r = requests.post(f"{url}/v1/traces", json={"traces": batch[start:start + 400]},
                          headers=auth(CALLER), timeout=10)
        assert r.status_code == 200, r.text


def _decision(url: str) -> Any:
    view = requests.get(f"{url}/v1/roles/{ROLE}/gate", headers=auth(GATEKEEPER), timeout=10).json()
    body = requests.get(f"{url}/v1/bindings/{ROLE}", headers=auth(CALLER), timeout=5).json()
    record = VersionedBinding.model_validate(body)
    return view, decide(ROLE, record, evidence_from_view(view), time.time())


def test_a_candidate_taking_clearly_more_steps_at_p95_is_rolled_back(router: str) -> None:
    """p95 6 -> 10 steps: the candidate fails on p95_steps and the stage's look rolls back."""
    _runs(router, 4)
    view, decision = _decision(router)
    codes = [r["code"] for r in view["arms"]["candidate"]["reasons"]]
    assert codes == ["p95_steps"] and view["arms"]["candidate"]["p95_steps"] >= 9
    assert view["arms"]["current"]["reasons"] == []
    assert decision.action is Action.ROLLBACK and "p95 steps" in decision.reason


def test_a_candidate_taking_the_same_steps_is_not(router: str) -> None:
    """The same step distribution: no steps reason, the stage advances."""
    _runs(router, 0)
    view, decision = _decision(router)
    assert view["arms"]["candidate"]["reasons"] == []
    assert decision.action is Action.ADVANCE, decision


def _window(steps: dict[int, int]) -> WindowStats:
    counts = {"n": sum(steps.values()), "passes": sum(steps.values())}
    counts.update({f"steps:{k}": v for k, v in steps.items()})
    return WindowStats(counts)


def test_a_few_runs_over_the_ceiling_no_longer_fail_on_the_point_estimate() -> None:
    """The old point estimate failed p95 = 5 over a ceiling of 4; the lower bound does not."""
    t = Thresholds(min_samples=50, p95_step_ceiling=4)
    borderline = _window({3: 94, 5: 6})
    assert borderline.p95_steps() > 4
    assert step_reasons(borderline, None, t, Stage.CANARY) == []
    clearly = _window({3: 60, 5: 40})
    (reason,) = step_reasons(clearly, None, t, Stage.CANARY)
    assert reason.code == "p95_steps" and reason.value == 5.0 and reason.limit == 4.0


def test_the_steps_gate_waits_for_min_samples() -> None:
    """Under min_samples no steps reason: a rated rule needs enough runs."""
    t = Thresholds(min_samples=50, p95_step_ceiling=2)
    assert step_reasons(_window({9: 20}), None, t, Stage.CANARY) == []
