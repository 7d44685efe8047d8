"""Graded responses: gate.responses picks rollback (default), hold (pause for a human) or warn.

Pure decide() and next_step on each response; the policy's validation; a forbidden tool
that rolls back whatever the policy says; and a real gatekeeper that pauses a broken
candidate instead of rolling it back, or only warns, as the policy asks.
"""

from __future__ import annotations

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from pydantic import ValidationError

from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.next_step import explain
from gatekeeper.machine.responses import Responder
from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.gatekeeping import EVERY_RULE, binding, gate_view, keeper, put_canary, tick_until
from tests.population import Population
from tests.servers import werkzeug_server

NOW = 1_000_000.0
PASSING_DRIFTING = Evidence(verdict="pass", n=100, passes=95, current_n=1000,
                            current_passes=950, candidate_alarms=("run_failure",))
FORBIDDEN = Evidence(verdict="fail", n=10, passes=9,
                     reasons=("forbidden-tool calls in 1 of 10 traces",),
                     reason_codes=("forbidden_rate",))


def _record(responses: dict[str, str]) -> VersionedBinding:
    gate = GatePolicy(thresholds=Thresholds(min_samples=20, min_stage_seconds=60, alpha=0.01),
                      responses=responses)
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.CANARY, share=0.1,
                      gate=gate, stage_since=NOW - 120)
    return VersionedBinding(role="r", version=4, binding=binding, updated_at=NOW, updated_by="t")


def test_rollback_is_the_default_hold_stops_warn_goes_on() -> None:
    """A candidate CUSUM alarm: rollback by default, a policy hold, or a warning and advance."""
    assert decide("r", _record({}), PASSING_DRIFTING, NOW).action is Action.ROLLBACK
    held = decide("r", _record({"drift": "hold"}), PASSING_DRIFTING, NOW)
    assert held.action is Action.HOLD
    assert held.reason.startswith("held by policy (gate.responses['drift']): drift alarm")
    assert held.details["response"] == {"rule": "drift", "applied": "hold",
                                        "policy": "gate.responses['drift']"}
    warned = decide("r", _record({"drift": "warn"}), PASSING_DRIFTING, NOW)
    assert warned.action is Action.ADVANCE
    assert [w["rule"] for w in warned.details["warnings"]] == ["drift"]


def test_a_forbidden_tool_rolls_back_whatever_the_policy_says() -> None:
    """gate: warn (or hold) does not spare a forbidden call under a zero limit."""
    for response in ("warn", "hold"):
        decision = decide("r", _record({"gate": response}), FORBIDDEN, NOW)
        assert decision.action is Action.ROLLBACK
        assert decision.details["response"]["policy"] == "forbidden tools always roll back"


def test_next_step_says_which_response_was_applied_and_why() -> None:
    """The gate view's `next` names the held rule, and lists each warning."""
    record = _record({"drift": "hold"})
    held = explain(decide("r", record, PASSING_DRIFTING, NOW), record.binding,
                   PASSING_DRIFTING, NOW).as_dict()
    assert held["state"] == "held" and "pauses the role for a human" in held["summary"]
    assert held["response"]["applied"] == "hold"
    record = _record({"drift": "warn"})
    warned = explain(decide("r", record, PASSING_DRIFTING, NOW), record.binding,
                     PASSING_DRIFTING, NOW).as_dict()
    assert warned["state"] == "advancing"
    assert warned["lines"][-1].startswith("warning only (gate.responses['drift']): drift alarm")


def test_the_policy_names_real_rules_and_responses() -> None:
    """An unknown rule or response is refused, naming it; criterion:<key> is a rule."""
    GatePolicy(responses={"criterion:escalation:high-value": "hold", "sequential": "warn"})
    with pytest.raises(ValidationError, match="'seqential' is not a rule"):
        GatePolicy(responses={"seqential": "warn"})
    with pytest.raises(ValidationError):
        GatePolicy(responses={"drift": "pause"})


@pytest.mark.slow
@pytest.mark.usefixtures("quick_buckets")
def test_a_real_gatekeeper_holds_or_only_warns_as_the_policy_says(app: Flask) -> None:
    """hold: the broken candidate is paused on its canary for a human; warn: never rolled back,
    and `rolegate status` shows the warning."""
    with werkzeug_server(app) as url:
        put_canary(url, "held", "cfg-broken", [0.5, 1.0], {r: "hold" for r in EVERY_RULE})
        put_canary(url, "warned", "cfg-broken", [0.5, 1.0], {r: "warn" for r in EVERY_RULE})
        with keeper(url, "gk-graded") as gatekeeper, Population(url, ["held", "warned"]):
            tick_until(gatekeeper, lambda: binding(url, "held")["paused"],
                       "the policy hold to pause the broken candidate")
            tick_until(gatekeeper, lambda: gate_view(url, "warned")["next"]["warnings"],
                       "a warning on the warned role")
        held = binding(url, "held")
        assert held["stage"] == "canary" and held["share"] == 0.5
        entry = requests.get(f"{url}/v1/bindings/held/history?limit=1", headers=auth(CALLER),
                             timeout=5).json()["entries"][0]
        assert entry["action"] == "pause" and entry["reason"].startswith(
            "gatekeeper: held by policy (gate.responses[")
        assert binding(url, "warned")["stage"] != "rolled_back"
        view = gate_view(url, "held")
        assert view["next"]["state"] == "paused" and "held by policy" in view["next"]["summary"]
        env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
        out = CliRunner().invoke(main, ["status", "warned"], env=env).stdout
        assert "warning only (gate.responses[" in out


def test_per_criterion_responses_take_the_most_drastic() -> None:
    """criterion:<key> entries win over `criteria`; several keys: the most drastic response."""

    responder = Responder({"criteria": "warn", "criterion:a": "warn", "criterion:b": "hold"},
                          forbidden=False)
    assert responder.response("criteria", ["a"]) == ("warn", "gate.responses['criterion:a']")
    assert responder.response("criteria", ["a", "b"])[0] == "hold"
    assert responder.response("criteria", ["c"]) == ("warn", "gate.responses['criteria']")
    assert responder.response("sequential") == ("rollback", "default")
