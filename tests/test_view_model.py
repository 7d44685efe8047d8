"""The gate view's typed sections serve exactly the JSON their builders make (pure, no I/O).

Each section is built as its model (`gatekeeper.view_model`); the API serves
`as_json()`. A key the model does not name would vanish from the answer, an int
declared float would come back 3.0: each case here compares the model's JSON with
the builder's own dict, and the gatekeeper's reading of it with the old reader's.
"""

from __future__ import annotations

import math

from bindings.models import Binding, DriftPolicy, GatePolicy, Stage
from gatekeeper.gate import evaluate
from gatekeeper.machine.evidence import carried_of
from gatekeeper.machine.next_step import next_step
from gatekeeper.stats.concurrent import Comparison
from gatekeeper.stats.drift import RUN_FAILURE, Detector, Params, disabled_view, section
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.rollout import Carried, EarlierStage
from gatekeeper.stats.units import MetricEvidence, UnitVerdict
from gatekeeper.view_model import (
    ArmView,
    DriftOffView,
    DriftOnView,
    NextView,
    RolloutView,
    UnitTestView,
    arm_view,
    drift_view,
)
from gatekeeper.window import WindowStats
from tests.test_decision_waits import NOON, SHORT, _record


def _detector(alarm: bool, h: float = 4.0) -> dict[str, object]:
    params = Params(p0=0.05, shift=0.1, h=h, reference=400, observed=0.04)
    runs = [(f"{i}-0", Run(key=f"k{i}", passed=not alarm, tools=(), tool_error=False,
                           forbidden_call=False)) for i in range(1, 60)]
    return Detector(RUN_FAILURE, params).advance(runs).as_dict(True)


def test_the_drift_section_round_trips_both_shapes() -> None:
    """Enabled (detectors, an alarm, an infinite h) and disabled: the model's JSON is the dict."""
    on = section({RUN_FAILURE: _detector(True)}, {RUN_FAILURE: _detector(False, math.inf)},
                 DriftPolicy())
    on["caught_up"], on["alert"] = True, False
    model = drift_view(on)
    assert isinstance(model, DriftOnView) and model.as_json() == on
    assert [(a.arm, a.metric) for a in model.alarms] == [("candidate", RUN_FAILURE)]
    assert DriftOnView.model_validate(on).as_json() == on  # as the gatekeeper reads it back
    off = {**disabled_view(), "alert": False}
    assert isinstance(drift_view(off), DriftOffView) and drift_view(off).as_json() == off


def test_the_unit_test_and_next_round_trip() -> None:
    """The unit verdict's dict and next's dict come back unchanged from their models."""
    verdict = UnitVerdict(log_e=1.23456, threshold=5.9, alpha=0.01, horizon=None,
                          metrics=(MetricEvidence("run_failure", 0.5, 0.7, 30, 31),),
                          repeats=True, repeats_why="40 keys carry 900 runs")
    assert UnitTestView.model_validate(verdict.as_dict()).as_json() == verdict.as_dict()
    step = next_step("r", _record(), SHORT, NOON + 60)
    assert step.as_view().as_json() == step.as_dict()
    assert NextView.model_validate(step.as_dict()) == step.as_view()


def test_the_rollout_section_round_trips_and_reads_as_before() -> None:
    """Carried.as_dict through RolloutView is unchanged, and decide() reads the same Carried."""
    binding = Binding(current="a", candidate="b", stage=Stage.CANARY, share=0.5,
                      stage_since=30.0, steps=(0.1, 0.5, 1.0))
    carried = Carried(Stage.SHADOW, 10.0, (
        EarlierStage(Stage.SHADOW, 0.0, 10.0, n=10, passes=9, regressions=2, improvements=1),
        EarlierStage(Stage.CANARY, 0.1, 20.0, n=5, passes=5,
                     concurrent=Comparison(cells=3, candidate_n=5, current_n=40))))
    shown = carried.as_dict(binding)
    model = RolloutView.model_validate(shown)
    assert model.as_json() == shown
    assert carried_of(model) == Carried.from_view(shown) == carried


def test_an_arm_keeps_every_figure_the_gate_gives_it() -> None:
    """The typed fields and the untyped rest (pass rate, tallies, reporters) come back alike."""
    window = WindowStats({"n": 40, "passes": 30, "forbidden": 1})
    figures = {"config": "cfg-b", **evaluate(window, GatePolicy()).to_json(), "clashes": 0,
               "by_reporter": {"caller": {"n": 40, "pass_rate": 0.75, "counted": True}},
               "counting_missing": {"missing": 2, "n": 42, "passes": 30,
                                    "pass_rate": 30 / 42}}
    model = arm_view(figures)
    assert model.reasons and model.as_json() == figures
    assert ArmView.model_validate(figures).as_json() == figures
    assert (model.verdict, model.n, model.passes) == (figures["verdict"], 40, 30)


def test_the_heartbeat_summary_round_trips() -> None:
    """No gatekeeper, and one leading with an error: the summary comes back unchanged."""
    from gatekeeper.heartbeat import summarize
    from gatekeeper.view_model import GatekeeperView

    beat = {"holder": "g1", "leader": True, "interval_s": 5.0, "roles_judged": 3,
            "errors": ["view of r failed"], "time": 100.0}
    for summary in (summarize([], 100.0), summarize([beat], 104.0)):
        assert GatekeeperView.model_validate(summary).as_json() == summary
