"""Decision.details is a model (`gatekeeper.machine.details`) whose JSON is what history keeps.

Pure decide() on evidence of several rules: the fields are typed, the JSON holds only
the figures the rule set (a hold on too few runs has no `response`), reading by key
reads that JSON, and the loop's outcome is added without losing a figure.
"""

from __future__ import annotations

import json

from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.details import DecisionDetails
from gatekeeper.view_model.paired import paired_view

NOW = 1_000_000.0


def _record(stage: Stage = Stage.CANARY, responses: dict[str, str] | None = None,
            since: float = NOW - 120) -> VersionedBinding:
    gate = GatePolicy(thresholds=Thresholds(min_samples=20, min_stage_seconds=60, alpha=0.01),
                      responses=responses or {}, power=None)
    binding = Binding(current="a", candidate="b", stage=stage, share=0.0 if stage is
                      Stage.SHADOW else 0.1, gate=gate, stage_since=since,
                      steps=(0.1, 1.0))
    return VersionedBinding(role="r", version=4, binding=binding, updated_at=NOW, updated_by="t")


def test_a_decision_serves_only_the_figures_its_rule_set() -> None:
    """An advance, a policy hold and a warning: typed fields, and the JSON a history keeps."""
    passing = Evidence(verdict="pass", n=100, passes=95, current_n=1000, current_passes=950)
    advanced = decide("r", _record(), passing, NOW)
    assert advanced.action is Action.ADVANCE
    details = advanced.details
    assert (details.n, details.passes, details.elapsed_s) == (100, 95, 120.0)
    assert set(details.as_json()) == {"verdict", "n", "passes", "current_n", "current_passes",
                                      "elapsed_s", "sequential"}
    assert "response" not in details and details.get("response") is None
    assert advanced.as_dict()["details"] == details.as_json()
    drifting = Evidence(verdict="pass", n=100, passes=95, current_n=1000, current_passes=950,
                        candidate_alarms=("run_failure",))
    held = decide("r", _record(responses={"drift": "hold"}), drifting, NOW)
    assert held.details.response is not None and held.details.response.applied == "hold"
    assert held.details["response"] == {"rule": "drift", "applied": "hold",
                                        "policy": "gate.responses['drift']"}
    assert held.details.drift_alarms == ["run_failure"]
    warned = decide("r", _record(responses={"drift": "warn"}), drifting, NOW)
    assert [w.rule for w in warned.details.warnings or ()] == ["drift"]
    assert warned.details["warnings"][0]["policy"] == "gate.responses['drift']"


def test_the_shadow_figures_are_those_the_report_gave() -> None:
    """A partial paired report keeps only its own figures in the details, as before."""
    report = {"verdict": "pass", "reasons": [], "pairs": 100,
              "flips": {"pass_to_fail": 1, "fail_to_pass": 2}}
    evidence = Evidence(verdict="pass", n=100, passes=95, paired=paired_view(report))
    decision = decide("r", _record(Stage.SHADOW), evidence, NOW)
    assert decision.details["paired"] == {"pairs": 100, "flips": report["flips"]}


def test_the_loop_adds_its_outcome_and_the_json_reads_back() -> None:
    """with_ adds the outcome; the JSON validates back into the same details; extras stay."""
    passing = Evidence(verdict="pass", n=100, passes=95, current_n=1000, current_passes=950,
                       figures={"note": "kept"})
    details = decide("r", _record(), passing, NOW).details
    applied = details.with_(outcome="applied", new_version=5)
    assert applied["outcome"] == "applied" and applied.new_version == 5
    assert applied["note"] == "kept" and {**details.as_json(), "outcome": "applied",
                                          "new_version": 5} == applied.as_json()
    text = json.dumps(applied.as_json())
    assert DecisionDetails.model_validate_json(text).as_json() == applied.as_json()
    assert DecisionDetails(unjudged=True).as_json() == {"unjudged": True}
