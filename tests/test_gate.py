"""The window aggregate and the gate's verdicts, reasons and comparisons (pure, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from bindings.models import GatePolicy, Invariants, Thresholds
from gatekeeper.checks.invariants import check
from gatekeeper.gate import compare, evaluate
from gatekeeper.stats.statistics import wilson_interval
from gatekeeper.window import WindowStats, cost_bucket, increments
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
INV = Invariants(forbidden_tools=("egress",), max_steps=5, required_tools=("read",))


def trace(i: int, **fields: Any) -> Trace:
    """Trace number `i`, a passing run unless `fields` say otherwise."""
    data: dict[str, Any] = {"run_id": f"r{i}", "role": "r", "config": "c", "arm": "candidate",
                            "stamps": STAMPS, "tools": ["read"], "cost_usd": 0.01}
    data.update(fields)
    return Trace.model_validate(data)


def window(passing: int, failing: int = 0, **bad: Any) -> WindowStats:
    """A window of `passing` good traces and `failing` ones built with `bad` fields."""
    traces = [trace(i) for i in range(passing)]
    traces += [trace(passing + i, **bad) for i in range(failing)]
    return WindowStats.from_traces(traces, INV)


def policy(**thresholds: Any) -> GatePolicy:
    """A gate policy with the test invariants and `thresholds`."""
    return GatePolicy(thresholds=Thresholds(**thresholds), invariants=INV)


@pytest.mark.parametrize("successes, n, low, high", [
    # Newcombe (1998), Stat Med 17:857, table I, method 3 (Wilson score).
    (81, 263, 0.2553, 0.3662),
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (9, 10, 0.5958, 0.9821),
])
def test_wilson_interval_known_values(successes: int, n: int, low: float, high: float) -> None:
    """The 95% Wilson interval matches published values to four places."""
    got = wilson_interval(successes, n)
    assert got == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


def test_window_counts() -> None:
    """A window counts passes, forbidden traces, steps, cost, tool errors and the tool tally."""
    traces = [
        trace(1),
        trace(2, tools=["read", "egress"]),
        trace(3, tools=["read", "read"], cost_usd=0.03,
              steps=[{"tool": "read"}, {"tool": "read", "error": "timeout"}]),
    ]
    w = WindowStats.from_traces(traces, INV)
    assert (w.n, w.passes, w.forbidden, w.blocking) == (3, 2, 1, 1)
    assert w.tool_tally() == {"read": 4, "egress": 1}
    assert w.steps_histogram() == {1: 1, 2: 2}
    assert (w.calls, w.tool_errors, w.error_runs) == (5, 1, 1)
    assert w.cost_usd == pytest.approx(0.05) and w.mean_cost_usd() == pytest.approx(0.05 / 3)
    assert w.forbidden_tools() == {"egress": 1}
    assert w.criterion_counts() == {"answered": (3, 3), "forbidden_tools": (2, 3), "required_tools": (3, 3),
                                    "max_steps": (3, 3)}


def test_window_merge_equals_whole() -> None:
    """Two windows merged equal the window over all their traces; fields round-trip."""
    traces = [trace(i, tools=["read"] * (i % 7)) for i in range(40)]
    whole = WindowStats.from_traces(traces, INV)
    merged = WindowStats.from_traces(traces[:13], INV).merge(
        WindowStats.from_traces(traces[13:], INV))
    assert merged == whole
    stored = {k.encode(): str(v).encode() for k, v in whole.fields.items()}
    assert WindowStats.from_fields(stored) == whole


def test_cost_bucket_rounds_up_to_three_digits() -> None:
    """Cost buckets keep three significant digits, rounding up."""
    assert cost_bucket(0) == 0 and cost_bucket(999) == 999
    assert cost_bucket(12_341) == 12_400 and cost_bucket(40_000) == 40_000


def test_increments_skip_zeros() -> None:
    """One trace's increments carry only the fields it moves."""
    t = trace(1, tools=[], cost_usd=0.0)
    inc = increments(t, check(t, Invariants()))
    assert inc == {"n": 1, "passes": 1, "answered": 1, "steps:0": 1, "cost:0": 1,
                   "crit_n:answered": 1, "crit_pass:answered": 1}


def test_empty_window_is_insufficient_data() -> None:
    """No traces never fails and never passes."""
    verdict = evaluate(WindowStats(), policy())
    assert verdict.verdict == "insufficient_data"
    assert verdict.reasons[0].code == "min_samples"
    assert verdict.metrics["pass_rate"] is None and verdict.metrics["pass_rate_interval"] is None


def test_few_samples_insufficient_even_when_failing_rate() -> None:
    """A low pass rate below min_samples is insufficient data, not a failure."""
    w = window(5, 5, tools=["read"] * 9)  # half exceed max_steps
    verdict = evaluate(w, policy(min_samples=50))
    assert verdict.verdict == "insufficient_data"
    assert [r.code for r in verdict.reasons] == ["min_samples"]


def test_pass_verdict() -> None:
    """Enough traces and every threshold met gives pass with its figures."""
    verdict = evaluate(window(95, 5, tools=["read"] * 9), policy(min_samples=50))
    assert verdict.verdict == "pass" and verdict.reasons == ()
    assert verdict.metrics["pass_rate"] == 0.95
    assert verdict.metrics["pass_rate_interval"] == list(wilson_interval(95, 100))
    assert verdict.metrics["criteria"]["max_steps"]["pass_rate"] == 0.95


def test_fail_on_pass_rate() -> None:
    """A pass rate under min_pass_rate fails with the rate, its interval and the limit."""
    verdict = evaluate(window(80, 20, tools=["read"] * 9), policy(min_samples=50))
    assert verdict.verdict == "fail"
    (reason,) = verdict.reasons
    assert reason.code == "pass_rate" and reason.value == 0.8 and reason.limit == 0.9
    assert "95% CI" in reason.message and "80/100" in reason.message


def test_a_candidate_whose_every_run_crashed_fails() -> None:
    """Unanswered runs are failed runs: pass rate 0 and a fail, by the `answered` criterion."""
    verdict = evaluate(window(0, 60, answered=False), policy(min_samples=50))
    assert verdict.verdict == "fail" and verdict.metrics["pass_rate"] == 0.0
    assert verdict.metrics["answered_rate"] == 0.0
    assert verdict.metrics["criteria"]["answered"]["pass_rate"] == 0.0
    assert [r.code for r in verdict.reasons] == ["pass_rate"]


def test_unanswered_runs_can_be_left_to_the_other_invariants() -> None:
    """A policy with answered=False judges unanswered runs by its other invariants only."""
    lenient = INV.model_copy(update={"answered": False})
    crashed = WindowStats.from_traces([trace(i, answered=False) for i in range(60)], lenient)
    verdict = evaluate(crashed, GatePolicy(thresholds=Thresholds(min_samples=50),
                                           invariants=lenient))
    assert verdict.verdict == "pass" and "answered" not in verdict.metrics["criteria"]


def test_fail_on_p95_steps() -> None:
    """p95 steps over the ceiling fails, even when every run passed its invariants."""
    w = WindowStats.from_traces([trace(i, tools=["read"] * (1 + i % 5)) for i in range(60)],
                                Invariants())
    verdict = evaluate(w, policy(min_samples=50, p95_step_ceiling=4))
    assert verdict.verdict == "fail"
    assert [(r.code, r.value, r.limit) for r in verdict.reasons] == [("p95_steps", 5.0, 4.0)]


def test_fail_on_mean_cost() -> None:
    """A mean cost over the budget fails with the mean and the budget."""
    verdict = evaluate(window(60), policy(min_samples=50, max_mean_cost_usd=0.005))
    (reason,) = verdict.reasons
    assert reason.code == "mean_cost" and reason.value == pytest.approx(0.01)
    assert verdict.metrics["p95_cost_usd"] == pytest.approx(0.01)


def test_single_forbidden_call_fails_at_any_n() -> None:
    """With max_forbidden_rate 0, one forbidden call fails the window however few or many."""
    few = evaluate(window(3, 1, tools=["read", "egress"]), policy(min_samples=50))
    assert few.verdict == "fail" and [r.code for r in few.reasons] == ["forbidden_rate"]
    many = evaluate(window(999, 1, tools=["read", "egress"]),
                    policy(min_samples=50, min_pass_rate=0.5))
    assert many.verdict == "fail" and many.reasons[0].code == "forbidden_rate"
    assert many.reasons[0].value == pytest.approx(0.001)
    assert "egress" in many.reasons[0].message
    assert many.metrics["pass_rate"] == pytest.approx(0.999)


def test_nonzero_forbidden_limit_is_a_rate() -> None:
    """A non-zero forbidden-rate limit is judged only with enough traces, on its own."""
    w = window(97, 3, tools=["read", "egress"])
    assert evaluate(w, policy(min_samples=200, max_forbidden_rate=0.01)).verdict == \
        "insufficient_data"
    verdict = evaluate(w, policy(min_samples=50, max_forbidden_rate=0.01, min_pass_rate=0.5))
    assert [r.code for r in verdict.reasons] == ["forbidden_rate"]
    assert evaluate(w, policy(min_samples=50, max_forbidden_rate=0.05,
                              min_pass_rate=0.5)).verdict == "pass"


def test_required_tool_lost_fails_whatever_the_pass_rate() -> None:
    """Losing a required tool fails even when the pass rate clears the bar."""
    verdict = evaluate(window(99, 1, tools=["other"]), policy(min_samples=50))
    assert verdict.verdict == "fail"
    (reason,) = verdict.reasons
    assert reason.code == "required_tool_lost" and "'read'" in reason.message
    assert verdict.metrics["required_lost"] == {"read": 1}


def test_every_reason_listed() -> None:
    """A window breaking several rules lists every reason."""
    w = window(10, 50, tools=["egress"] * 9, cost_usd=1.0)
    verdict = evaluate(w, policy(min_samples=50, p95_step_ceiling=5, max_mean_cost_usd=0.1))
    assert {r.code for r in verdict.reasons} == {"forbidden_rate", "required_tool_lost",
                                                "pass_rate", "p95_steps", "mean_cost"}
    assert verdict.to_json()["verdict"] == "fail"


def test_compare_difference_with_interval() -> None:
    """compare gives candidate minus current pass rate with an interval around it."""
    cmp = compare(window(80, 20, tools=["read"] * 9), window(90, 10, tools=["read"] * 9))
    assert cmp.difference == pytest.approx(-0.1)
    assert cmp.low is not None and cmp.high is not None
    assert cmp.low < -0.1 < cmp.high < 0.05
    assert cmp.to_json()["sufficient"] is True


def test_compare_with_empty_side_has_no_figures() -> None:
    """With one side empty the comparison carries no difference, not a zero."""
    cmp = compare(WindowStats(), window(10))
    assert cmp.difference is None and cmp.to_json()["interval"] is None
    assert not cmp.sufficient and cmp.current_pass_rate == 1.0


@pytest.mark.parametrize("n", [1, 7, 20, 200, 1000, 99_999])
def test_wilson_bounds_at_the_ends_are_exact(n: int) -> None:
    """No successes: the lower bound is exactly 0 (not 2.78e-17); all: the upper is exactly 1."""
    assert wilson_interval(0, n)[0] == 0.0
    assert wilson_interval(n, n)[1] == 1.0
