"""Approvals: a ladder step with `"approval": true` holds, once its gate passes, for an operator.

The stage machine's APPROVE move, decide()'s hold, the API's scopes and history, the
CLI, and a real gatekeeper that waits at the step and continues once approved.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from flask import Flask

from bindings.errors import IllegalTransition
from bindings.models import Binding, CanaryStep, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.stages import Event, apply
from router.cli.main import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.gatekeeping import APPROVAL_STEPS, gate_view, keeper, put_canary, tick_until
from tests.population import Population
from tests.servers import werkzeug_server

NOW = 1_000_000.0
POLICY = GatePolicy(thresholds=Thresholds(min_samples=20, min_stage_seconds=60, alpha=0.01),
                    power=None)
STEPS = (0.1, CanaryStep(share=0.5, approval=True), 1.0)
PASSING = Evidence(verdict="pass", n=100, passes=95, current_n=1000, current_passes=950)
FAILING = Evidence(verdict="fail", reasons=("forbidden-tool calls in 1 of 3 traces",), n=3)


def _binding(share: float) -> Binding:
    stage = Stage.FULL if share == 1.0 else Stage.CANARY
    return Binding(current="cfg-a", candidate="cfg-b", stage=stage, share=share, steps=STEPS,
                   gate=POLICY, stage_since=NOW - 120)


def _record(binding: Binding) -> VersionedBinding:
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=NOW, updated_by="t")


def test_the_stage_machine_approves_only_a_step_that_asks() -> None:
    """approve is legal on an approval step, once; a move off the step drops the approval."""
    with pytest.raises(IllegalTransition, match="asks for no approval"):
        apply(_binding(0.1), Event.APPROVE, NOW, actor="alice", reason="ok")
    waiting = _binding(0.5)
    assert waiting.needs_approval() and waiting.approved is None
    approved = apply(waiting, Event.APPROVE, NOW, actor="alice", reason="numbers look fine")
    assert approved.binding.approved is not None
    assert approved.binding.approved.actor == "alice"
    with pytest.raises(IllegalTransition, match="already approved by alice"):
        apply(approved.binding, Event.APPROVE, NOW, actor="bob", reason="again")
    moved = apply(approved.binding, Event.ADVANCE, NOW).binding
    assert moved.stage is Stage.FULL and moved.approved is None


def test_decide_holds_a_passed_step_until_approved_and_never_delays_a_rollback() -> None:
    """Gate passed at the 0.5 step: hold; approved: advance; failing: roll back either way."""
    waiting = _binding(0.5)
    held = decide("r", _record(waiting), PASSING, NOW)
    assert held.action is Action.HOLD and held.details["awaiting_approval"] is True
    assert held.reason.startswith("awaiting approval")
    approved = apply(waiting, Event.APPROVE, NOW, actor="alice", reason="ok").binding
    assert decide("r", _record(approved), PASSING, NOW).action is Action.ADVANCE
    assert decide("r", _record(waiting), FAILING, NOW).action is Action.ROLLBACK
    # A step without approval advances as before.
    assert decide("r", _record(_binding(0.1)), PASSING, NOW).action is Action.ADVANCE


def test_approve_needs_the_operator_scope_and_is_recorded(app: Flask) -> None:
    """Only an operator approves; 409 where nothing waits; history names who and why."""
    client = app.test_client()
    binding = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.5,
               "steps": [0.1, {"share": 0.5, "approval": True}]}
    assert client.put("/v1/bindings/r", json=binding, headers=auth(OPERATOR)).status_code == 201
    body = {"reason": "canary numbers reviewed"}
    for token in (CALLER, GATEKEEPER):
        assert client.post("/v1/bindings/r/approve", json=body,
                           headers=auth(token)).status_code == 403
    assert client.post("/v1/bindings/r/approve", json={},
                       headers=auth(OPERATOR)).status_code in (400, 422)
    answer = client.post("/v1/bindings/r/approve", json=body, headers=auth(OPERATOR))
    assert answer.status_code == 200, answer.text
    assert answer.json["binding"]["approved"]["actor"] == "alice"
    again = client.post("/v1/bindings/r/approve", json=body, headers=auth(OPERATOR))
    assert again.status_code == 409 and "already approved" in again.text
    entry = client.get("/v1/bindings/r/history?limit=1", headers=auth(CALLER)).json["entries"][0]
    assert entry["action"] == "approve" and entry["reason"] == "canary numbers reviewed"


@pytest.mark.slow
def test_a_real_gatekeeper_waits_for_the_approval_then_continues(app: Flask) -> None:
    """Healthy traffic: the gatekeeper stops at the approval step; `rolegate approve` frees it."""
    with werkzeug_server(app) as url, keeper(url, "gk-approve") as gatekeeper:
        put_canary(url, "r", "cfg-good", APPROVAL_STEPS)
        with Population(url, ["r"]):
            tick_until(gatekeeper, lambda: gate_view(url, "r")["next"]["state"]
                       == "awaiting_approval", "the approval step to pass its gate")
            for _ in range(5):
                gatekeeper.once()
            assert gate_view(url, "r")["share"] == 0.6  # still held: nobody approved
            env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
            result = CliRunner().invoke(main, ["approve", "r", "--reason", "looks good"], env=env)
            assert result.exit_code == 0, result.output
            tick_until(gatekeeper, lambda: gate_view(url, "r")["stage"] in ("full", "stable"),
                       "the rollout to continue after approval")
