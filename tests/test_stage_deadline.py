"""A stage that cannot decide says so and ends: thresholds.stage_deadline_seconds and
deadline_action, in decide() and explained, and with a real router and gatekeeper."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from flask import Flask
from pydantic import ValidationError

from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.loop import Gatekeeper
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.next_step import explain
from rolegate.http import ApiClient
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.population import Population
from tests.servers import wait_for, werkzeug_server

NOW = 1_000_000.0
#: Too few runs for min_samples: decide() would hold this stage for ever.
STARVED = Evidence(verdict="insufficient_data", n=12, passes=12, current_n=400,
                   current_passes=380, reasons=("12 traces, need 50",),
                   reason_codes=("min_samples",))


def _record(age: float, **thresholds: object) -> VersionedBinding:
    gate = GatePolicy(thresholds=Thresholds(min_stage_seconds=900, **thresholds))
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.CANARY, share=0.1,
                      steps=(0.1, 0.5, 1.0), gate=gate, stage_since=NOW - age)
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=NOW, updated_by="t")


def test_the_default_deadline_holds_for_a_human_a_day_after_the_minimum() -> None:
    """24 h past the stage's 900 s minimum a starved stage is held by policy, with the reason."""
    assert Thresholds().stage_deadline_seconds == 86_400 and Thresholds().deadline_action == "hold"
    waiting = decide("r", _record(900 + 86_000), STARVED, NOW)
    assert waiting.action is Action.HOLD and "response" not in waiting.details
    step = explain(waiting, _record(900 + 86_000).binding, STARVED, NOW)
    assert step.as_dict()["deadline"] == {"at": NOW - 86_900 + 900 + 86_400, "action": "hold",
                                          "seconds": 86_400}
    held = decide("r", _record(900 + 86_400), STARVED, NOW)
    assert held.action is Action.HOLD
    assert held.reason.startswith("held by policy (thresholds.deadline_action): stage deadline")
    assert "waiting for data: 12 traces, need 50" in held.reason
    assert held.details["response"] == {"rule": "deadline", "applied": "hold",
                                        "policy": "thresholds.deadline_action"}
    assert explain(held, _record(900 + 86_400).binding, STARVED, NOW).state == "held"


def test_deadline_action_rollback_rolls_back_and_none_waits_for_ever() -> None:
    """deadline_action rollback ends the stage with a rollback; no deadline: it still holds."""
    rolled = decide("r", _record(2_000, stage_deadline_seconds=600, deadline_action="rollback"),
                    STARVED, NOW)
    assert rolled.action is Action.ROLLBACK and rolled.reason.startswith("stage deadline passed")
    forever = decide("r", _record(10**7, stage_deadline_seconds=None), STARVED, NOW)
    assert forever.action is Action.HOLD and "response" not in forever.details
    with pytest.raises(ValidationError):
        Thresholds(deadline_action="advance")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Thresholds(stage_deadline_seconds=0)


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


def _create(url: str, role: str, action: str) -> None:
    policy = {"thresholds": {"min_samples": 500, "min_stage_seconds": 0.0,
                             "stage_deadline_seconds": 0.5, "deadline_action": action},
              "invariants": {"artifact_exists": ["out.md"]}}
    binding = {"current": "cfg-a", "candidate": "cfg-good", "stage": "canary", "share": 0.5,
               "steps": [0.5, 1.0], "gate": policy}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text


def test_a_starved_stage_is_paused_or_rolled_back_with_the_reason_in_its_history(
        live: str) -> None:
    """With too little traffic past the deadline the real gatekeeper pauses (hold) or rolls
    back (rollback) the role; the history entry, gate view and status say why."""
    _create(live, "starved-hold", "hold")
    _create(live, "starved-rollback", "rollback")
    Population(live, ["starved-hold", "starved-rollback"], batch=30).step()
    api = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        keeper = Gatekeeper(api, interval=1.0)

        def ended() -> bool | None:
            keeper.once()
            held = api.get("/v1/bindings/starved-hold")["binding"]
            rolled = api.get("/v1/bindings/starved-rollback")["binding"]
            return (held["paused"] and rolled["stage"] == "rolled_back") or None

        wait_for(ended, 20.0, "both starved stages to end")
        keeper.release()
        pause = api.get("/v1/bindings/starved-hold/history")["entries"][0]
        rollback = api.get("/v1/bindings/starved-rollback/history")["entries"][0]
        view = api.get("/v1/roles/starved-hold/gate")
    finally:
        api.close()
    assert pause["action"] == "pause" and pause["actor"] == "gatekeeper"
    assert "stage deadline passed" in pause["reason"] and "waiting for data" in pause["reason"]
    assert rollback["action"] == "rollback" and "stage deadline passed" in rollback["reason"]
    assert view["next"]["state"] == "paused" and "stage deadline passed" in view["next"]["summary"]
