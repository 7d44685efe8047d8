"""The gate view's `difference` section: candidate - current, with always-valid intervals.

A list, one entry per metric: `{"metric", "estimate", "lower", "upper", "confidence"}`
(`gatekeeper.stats.difference`): the pass rate, latency (seconds) and cost
(USD, winsorized at current's 99th percentile so one runaway run does not
swamp the mean), over the stage's windows. The judged arm is shadow in shadow,
else the candidate. Run-level: when keys carry several runs each (the `units`
section's `repeats`) the interval is narrower than the keys justify, and each
entry says so in `note`; `arm` names the judged arm. Null when there is no candidate.
"""

from __future__ import annotations

from bindings.models import Stage
from gatekeeper.stats.difference import histogram_moments, mean_difference, rate_moments
from gatekeeper.view.context import GateContext
from gatekeeper.view_model.units import DifferenceView, UnitsView

#: Cost is winsorized at this quantile of current's runs.
COST_CAP_QUANTILE = 0.99


def _capped(histogram: dict[float, int], cap: float | None) -> dict[float, int]:
    if cap is None:
        return histogram
    out: dict[float, int] = {}
    for value, count in histogram.items():
        key = min(value, cap)
        out[key] = out.get(key, 0) + count
    return out


def _quantile(histogram: dict[float, int], q: float) -> float | None:
    total, seen = sum(histogram.values()), 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= q * total:
            return value
    return None


def difference_section(ctx: GateContext, units: UnitsView | None) -> list[DifferenceView] | None:
    """The `difference` section of the gate view built from `ctx`."""
    binding = ctx.record.binding
    judged = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    if judged not in ctx.arms:
        return None
    mine, theirs = ctx.arms[judged][1], ctx.arms["current"][1]
    cap = _quantile(theirs.cost_histogram(), COST_CAP_QUANTILE)
    metrics = [
        mean_difference("pass_rate", rate_moments(mine.n, mine.passes),
                        rate_moments(theirs.n, theirs.passes)),
        mean_difference("latency_s", histogram_moments(mine.latency_histogram()),
                        histogram_moments(theirs.latency_histogram())),
        mean_difference("cost_usd", histogram_moments(_capped(mine.cost_histogram(), cap)),
                        histogram_moments(_capped(theirs.cost_histogram(), cap))),
    ]
    repeats = units is not None and units.test.repeats
    note = ("run-level: keys carry several runs each, so this interval is narrower than "
            "the evidence") if repeats else None
    return [DifferenceView.model_validate({**m.as_dict(), "arm": judged, "note": note})
            for m in metrics]
