"""The gate view's typed sections serve exactly the JSON their builders make (pure, no I/O).

Each section is built as its model (`gatekeeper.view_model`); the API serves
`as_json()`. A key the model does not name would vanish from the answer, an int
declared float would come back 3.0: each case here compares the model's JSON with
the builder's own dict (as JSON text, `_same`: 3 == 3.0 in Python), and the
gatekeeper's reading of it with the old reader's.
"""

from __future__ import annotations

import json
import math
from typing import Any

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


def _same(model: Any, built: object) -> bool:
    """The model serves exactly `built` (as JSON text: an int stays an int, a key stays)."""
    served = model.as_json()
    # Read back as the gatekeeper reads it (validated from JSON), it serves the same again.
    again = type(model).model_validate(json.loads(json.dumps(built))).as_json()
    text = json.dumps(built, sort_keys=True)
    return json.dumps(served, sort_keys=True) == text == json.dumps(again, sort_keys=True)


def test_the_paired_section_round_trips_and_decide_reads_its_figures() -> None:
    """The tally's report with the view's extras, and the pairwise judge's failure (blocking
    true); the figures a decision keeps are the ones the section gives."""
    from gatekeeper.stats.pair_tally import Tally
    from gatekeeper.view_model.paired import PairedView, paired_view

    report = Tally(pairs=120, both_pass=100, both_fail=5, regressions=12,
                   improvements=3).report(alpha=0.001, min_samples=100).as_dict()
    built = {**report, "caught_up": True, "waiting": {"current": 2, "shadow": 0},
             "dropped": {"current": 0, "shadow": 0},
             "last_ids": {"current": "1-0", "shadow": None}}
    model = paired_view(built)
    assert model is not None and _same(model, built)
    assert (model.pairs, model.regressions, model.improvements) == (120, 12, 3)
    assert model.recorded() == {k: built[k] for k in ("pairs", "flips", "mcnemar")}
    failed = {**built, "verdict": "fail", "blocking": True, "reasons": ["pairwise judge"]}
    assert _same(PairedView.model_validate(failed), failed)
    partial = paired_view({"verdict": "insufficient", "reasons": ["5 pairs"]})
    assert partial is not None and partial.recorded() == {} and partial.mcnemar is None


def test_the_concurrent_section_round_trips_and_reads_its_comparison() -> None:
    """The fold's section (missing runs counted and not), and the Comparison decide() reads."""
    from gatekeeper.stats.concurrent import Cell
    from gatekeeper.view.concurrent import METRICS, Folded
    from gatekeeper.view_model.concurrent import concurrent_view

    binding = Binding(current="a", candidate="b", stage=Stage.CANARY, share=0.5,
                      stage_since=30.0, steps=(0.5, 1.0))
    cells = {m: [Cell(20, 6 if m == RUN_FAILURE else 0, 20, 1, bucket=b)
                 for b in (100, 101, 102)] for m in METRICS}
    folded = Folded.start(binding).advance(cells, 103)
    horizon = {"horizon": 3090.5, "lag_p99_s": {"candidate": 1.5, "current": None}}
    plain = folded.section(binding, None, horizon)
    found = concurrent_view(plain)
    assert found is not None and _same(found, plain)
    # As the old reader read the section's JSON (the view rounds the logs).
    assert found.comparison() == Comparison.from_dict(plain["metrics"][RUN_FAILURE])
    assert found.comparison().candidate_events == 18
    shown = {"counted_before": 102, "candidate": 4, "current": 0,
             "unadjusted": folded.metrics[RUN_FAILURE][0].as_dict()}
    counted = folded.section(binding, shown, horizon)
    assert _same(concurrent_view(counted), counted)


def test_the_reports_section_round_trips() -> None:
    """The report check with the missing-runs policy and the runs matched by id."""
    from gatekeeper.stats.reports import report_check
    from gatekeeper.view_model.reports import reports_view

    check = report_check(({1: 40, 2: 40}, {1: 30, 2: 31}), ({1: 40, 2: 40}, {1: 40, 2: 40}),
                         before=3, alpha=0.001)
    built = {"arm": "candidate", **check.as_dict(),
             "missing_runs": {"policy": "fail", "applied": True, "why_not": None,
                              "counted_reporters": [""], "missing": {"candidate": 19,
                                                                     "current": 0}},
             "runs": {arm: {"with_id": 0, "matched": 0, "missing": 0, "in_flight": 2}
                      for arm in ("candidate", "current")}}
    model = reports_view(built)
    assert model is not None and _same(model, built)
    assert (model.verdict, model.reason) == (built["verdict"], built["reason"])


def test_the_criteria_and_judges_sections_round_trip() -> None:
    """Tallies (scored and judged), the per-key tests decide() reads, and the judge's figures."""
    from gatekeeper.checks.review import Tally
    from gatekeeper.stats.criteria_gate import KeyCounts, criteria_tests
    from gatekeeper.view_model.criteria import criteria_view
    from gatekeeper.view_model.judges import judges_view

    keys = [KeyCounts("tone", 30, 10, 38, 2, source="judge", message="judged: ...",
                      held="observed until ..."),
            KeyCounts("verify", 35, 5, 40, 0, lost=5, gained=0, message="5 cases lost it"),
            KeyCounts("cite", 40, 0, 40, 0)]
    built = {"sample": 1000, "arms": {"current": {"config": "a", "spec": True, "n": 40,
                                                  "criteria": {
                                                      "verify": Tally(40, 0).as_dict(),
                                                      "tone": {**Tally(38, 2).as_dict(),
                                                               "source": "judge"}}}},
             "descriptions": {"verify": "calls verifyIdentity"},
             "regressions": {"shadow": [{"key": "verify", "lost": 5, "gained": 0,
                                         "cases": ["job-1"], "message": "5 cases lost it",
                                         "paired": True}]},
             "gate": {"shadow": [v.as_dict() for v in criteria_tests(keys, {}, 0.01)]}}
    model = criteria_view(built)
    assert model is not None and _same(model, built)
    assert sorted(model.keys_of("shadow"), key=lambda k: k.key) == sorted(
        (KeyCounts.from_dict(k) for k in built["gate"]["shadow"]), key=lambda k: k.key)
    judges = {"url": "http://judge", "model": "j-1", "rates": {"candidate": 1.0, "current": 0.5},
              "day": {"queued": 3, "skipped_full": 0, "skipped_budget": 0, "calls": 2,
                      "tokens": 900, "judged": 2, "errors": 1, "requeued": 0, "waiting": 1,
                      "claimed": 0, "last_error": "timeout"},
              "budget": {"calls": 1000, "tokens": 2_000_000, "exhausted": [], "message": None},
              "arms": {"candidate": {"tone": {"passed": 1, "failed": 1}}}, "min_judged": 5,
              "wait": "waiting for judged evidence: tone 2 of min_judged 5",
              "agreement": {"human": {"tone": {"agree": 3, "disagree": 1, "n": 4,
                                               "rate": 0.75}}},
              "min_agreement": 0.8, "min_agreement_runs": 20}
    found = judges_view(judges)
    assert found is not None and _same(found, judges) and found.wait == judges["wait"]
    paired = {**judges, "pairwise": {"rate": 0.2, "pairs": 0, "failure": None}}
    assert _same(judges_view(paired), paired)


def test_the_comparison_and_previous_sections_round_trip() -> None:
    """Each arm against current (cost and tokens beside), and a rolled-back stage's evidence."""
    from gatekeeper.gate import compare
    from gatekeeper.stats.winsor import winsorized_comparison
    from gatekeeper.view_model.comparison import ComparisonView, previous_view

    ours, theirs = WindowStats({"n": 40, "passes": 30}), WindowStats({"n": 50, "passes": 48})
    figures = {**compare(ours, theirs).to_json(),
               "cost_usd": winsorized_comparison({0.01: 30, 0.5: 2}, {0.01: 50}),
               "tokens": winsorized_comparison({100.0: 40}, {120.0: 50}, 0.5)}
    assert _same(ComparisonView.model_validate(figures), figures)
    empty = {**compare(WindowStats(), theirs).to_json(), "cost_usd": None, "tokens": None}
    assert _same(ComparisonView.model_validate(empty), empty)
    arm = {"config": "b", **evaluate(ours, GatePolicy()).to_json(), "clashes": 0}
    previous = {"version": 4, "stage": "canary", "share": 0.5,
                "window": {"since": 30.0, "until": 90.5, "epoch": "e1"},
                "rollback": {"version": 5, "time": 90.5, "actor": "gatekeeper",
                             "action": "rollback", "reason": "gate failed",
                             "details": {"n": 40, "sequential": {"reject": True}}},
                "arms": {"candidate": arm}, "comparison": {"candidate": figures}}
    model = previous_view(previous)
    assert model is not None and _same(model, previous)
