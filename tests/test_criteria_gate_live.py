"""The refunds fast candidate in shadow, through a real router and the gatekeeper: gated by criterion.

Every run of `refunds_v2_fast` passes the role's invariants (the pass rate is
100% on both arms), but it drops the verifyIdentity call on refunds over 1000:
`escalation:high-value` goes from all to none. The gatekeeper rolls it back
naming the key; a candidate that keeps the call is promoted; `rolegate status`
and the dashboard show every criterion with its arms.
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

from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action
from rolegate.http import ApiClient
from router.cli import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "refunds"
STAMPS = {"agent_version": "refunds-example 1.0", "instruction_hash": "h",
          "model_id": "deterministic-example", "tool_schema_hash": "t"}
GATE = {"invariants": {"allowed_tools": ["read_file", "lookupOrder", "verifyIdentity"],
                       "required_tools": ["lookupOrder"]},
        "thresholds": {"min_samples": 20, "min_stage_seconds": 0.0},
        # A few dozen runs: promotion without the power hold (tests/test_power_hold.py).
        "power": None}


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


def _put(url: str, path: str, body: dict[str, Any]) -> None:
    with requests.put(f"{url}{path}", json=body, headers=auth(OPERATOR), timeout=5) as r:
        assert r.status_code in (200, 201), r.text


def setup(url: str, candidate: str, criteria: dict[str, str] | None = None) -> None:
    """refunds on refunds_v1 with `candidate` in shadow; both configs carry the example spec."""
    spec = json.loads((EXAMPLE / "spec.json").read_text())
    for config in ("refunds_v1", candidate):
        _put(url, f"/v1/configs/{config}", {"spec": spec})
    gate = {**GATE, "criteria": criteria or {}}
    _put(url, "/v1/bindings/refunds", {"current": "refunds_v1", "candidate": candidate,
                                       "stage": "shadow", "gate": gate})


def run(run_id: str, arm: str, config: str, job: int, verify: bool) -> dict[str, Any]:
    """One refunds run as examples/refunds/agent.py reports it (every other job is over 1000)."""
    amount = 2500.0 if job % 2 == 0 else 300.0
    tools = ["read_file", "lookupOrder"] + (["verifyIdentity"] if verify and amount > 1000
                                            else [])
    customer = f"cust-{job}"
    return {"run_id": run_id, "role": "refunds", "arm": arm, "config": config,
            "key": f"order-{job}", "tools": tools, "stamps": STAMPS,
            "input": {"order": f"o-{job}", "customer": customer, "amount": amount},
            "output_text": json.dumps({"decision": "refund", "customer": {"id": customer},
                                       "amount": amount})}


def report(url: str, candidate: str, jobs: int, *, candidate_verifies: bool) -> None:
    """Each job run by current and, in shadow, by the candidate."""
    traces = [run(f"c{j}", "current", "refunds_v1", j, True) for j in range(jobs)]
    traces += [run(f"s{j}", "shadow", candidate, j, candidate_verifies) for j in range(jobs)]
    with requests.post(f"{url}/v1/traces", json={"traces": traces}, headers=auth(CALLER),
                       timeout=30) as r:
        assert r.status_code == 200, r.text
        assert all(result["status"] == "accepted" for result in r.json()["results"])


def test_fast_candidate_rolled_back_in_shadow_naming_the_criterion(live: str) -> None:
    """60 jobs, 30 over 1000: 100% pass rate on both arms, rolled back on escalation:high-value."""
    setup(live, "refunds_v2_fast")
    report(live, "refunds_v2_fast", 60, candidate_verifies=False)
    api = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        view = api.get("/v1/roles/refunds/gate")
        assert view["arms"]["shadow"]["pass_rate"] == 1.0
        assert view["arms"]["current"]["pass_rate"] == 1.0
        (decision,) = tick(api, time.time())
        binding = api.get("/v1/bindings/refunds")["binding"]
    finally:
        api.close()
    assert decision.action is Action.ROLLBACK, decision.reason
    assert decision.reason.startswith("criterion escalation:high-value: 30 cases lost the "
                                      "verifyIdentity call"), decision.reason
    (acted,) = decision.details["criteria"]
    assert acted["key"] == "escalation:high-value" and acted["mode"] == "gated"
    assert acted["test"] == "paired" and acted["lost"] == 30 and acted["gained"] == 0
    assert binding["stage"] == "rolled_back"


def test_healthy_candidate_keeping_the_call_is_promoted(live: str) -> None:
    """The same jobs with verifyIdentity kept: every key's evidence stays at 1, shadow passes."""
    setup(live, "refunds_v1b")
    report(live, "refunds_v1b", 60, candidate_verifies=True)
    api = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        (decision,) = tick(api, time.time())
    finally:
        api.close()
    assert decision.action is Action.ADVANCE, decision.reason
    assert "criteria" not in decision.details


def test_observed_criterion_is_shown_and_never_acts(live: str, app: Flask) -> None:
    """Marked observed, the lost key's test still rejects and is shown, but the stage advances."""
    setup(live, "refunds_v2_fast", {"escalation:high-value": "observed"})
    report(live, "refunds_v2_fast", 60, candidate_verifies=False)
    api = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        view = api.get("/v1/roles/refunds/gate")
        (decision,) = tick(api, time.time())
    finally:
        api.close()
    keys = {k["key"]: k for k in view["by_criterion"]["gate"]["shadow"]}
    lost = keys["escalation:high-value"]
    assert lost["mode"] == "observed" and lost["reject"] is True and lost["acts"] is False
    assert decision.action is Action.ADVANCE, decision.reason


def test_status_and_dashboard_show_every_criterion_with_its_arms(live: str, app: Flask) -> None:
    """Before the tick: status lists each key with both arms and what next names the key."""
    setup(live, "refunds_v2_fast", {"escalation:high-value": "blocking"})
    report(live, "refunds_v2_fast", 6, candidate_verifies=False)
    result = CliRunner().invoke(main, ["status", "refunds", "--url", live, "--token", OPERATOR])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  criteria   current / shadow, passed of scored" in lines
    (line,) = [x for x in lines if x.split()[:1] == ["escalation:high-value"]]
    assert line.split()[:3] == ["escalation:high-value", "3/3", "0/3"], line
    assert line.endswith("3 cases lost the verifyIdentity call  FAILS")
    assert any(x.split()[:3] == ["tool:lookupOrder", "6/6", "6/6"] for x in lines)
    (what_next,) = [x for x in lines if x.startswith("  what next")]
    assert "criterion escalation:high-value (blocking)" in what_next
    page = requests.get(f"{live}/ui/roles/refunds", headers=auth(OPERATOR), timeout=10)
    assert page.status_code == 200
    assert 'id="criteria-gate"' in page.text
    assert 'data-key="escalation:high-value"' in page.text
    assert "fails: rolls back" in page.text
