"""Cost and token comparisons winsorized at the pooled 99th percentile, raw means beside."""

from __future__ import annotations

from bindings.models import GatePolicy, Thresholds
from gatekeeper.gate import evaluate
from gatekeeper.stats.winsor import WINSOR_Q, winsorized_comparison
from gatekeeper.window import WindowStats


def _costs(values: list[int]) -> WindowStats:
    """A window of runs with these costs in micro-USD (and as many tokens)."""
    fields: dict[str, int] = {"n": len(values), "passes": len(values)}
    for v in values:
        fields[f"cost:{v}"] = fields.get(f"cost:{v}", 0) + 1
        fields[f"tok:{v}"] = fields.get(f"tok:{v}", 0) + 1
    fields["cost_micros"] = sum(values)
    return WindowStats(fields)


def test_two_runaway_runs_do_not_swing_the_cost_comparison() -> None:
    """2 of 300 candidate runs cost 1000x: the raw mean triples, the winsorized one barely moves."""
    current = _costs([1000] * 300)
    candidate = _costs([1000] * 298 + [1_000_000, 1_000_000])
    cost = winsorized_comparison(candidate.cost_histogram(), current.cost_histogram())
    assert cost is not None and cost["quantile"] == WINSOR_Q == 0.99
    assert cost["candidate_raw_mean"] > 7 * cost["current_raw_mean"]
    assert abs(cost["change"]) < 0.01 and cost["cap"] == 0.001
    tokens = winsorized_comparison(candidate.tokens_histogram(), current.tokens_histogram(), 0.15)
    assert tokens is not None and tokens["warning"] is False


def test_a_real_token_rise_still_warns_and_the_budget_reads_the_winsorized_mean() -> None:
    """+30% tokens on every run warns; max_mean_cost_usd judges the winsorized mean, raw shown."""
    tokens = winsorized_comparison(_costs([1300] * 300).tokens_histogram(),
                                   _costs([1000] * 300).tokens_histogram(), 0.15)
    assert tokens is not None and tokens["warning"] is True
    policy = GatePolicy(thresholds=Thresholds(max_mean_cost_usd=0.002, min_samples=10))
    spiky = _costs([1000] * 298 + [1_000_000, 1_000_000])
    assert evaluate(spiky, policy).passed
    assert evaluate(spiky, policy).metrics["winsorized_mean_cost_usd"] < 0.0011
    costly = evaluate(_costs([3000] * 300), policy)
    assert not costly.passed and "winsorized at p99; raw $0.003000" in costly.reasons[0].message
