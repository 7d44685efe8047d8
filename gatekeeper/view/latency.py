"""p95 latency gated against a ceiling and against current, at the stage's one look.

The judged arm's p95 fails when its lower bound (`gatekeeper.stats.quantiles`)
is over `p95_latency_ceiling_s`, or over (1 + `max_p95_latency_increase`) times
current's p95 upper bound; each bound at half the stage's one-look level
(`budget.final_alpha`), so a candidate whose p95 is within the line is failed
with chance at most that level. The reason is rated (code `p95_latency`):
decide() acts on it at the stage's end, as on p95 steps.
"""

from __future__ import annotations

from typing import Any

from bindings.models import Stage, Thresholds
from gatekeeper.gate import Reason
from gatekeeper.stats.budget import final_alpha
from gatekeeper.stats.quantiles import quantile_bounds
from gatekeeper.window import WindowStats

CODE = "p95_latency"


def latency_reasons(judged: WindowStats, current: WindowStats, thresholds: Thresholds,
                    stage: Stage) -> list[Reason]:
    """The judged arm's p95 latency reasons against the ceiling and against current."""
    mine = judged.latency_histogram()
    if not mine:
        return []
    level = final_alpha(thresholds.alpha, stage) / 2
    low, _ = quantile_bounds(mine, 0.95, level)
    reasons = []
    ceiling = thresholds.p95_latency_ceiling_s
    if ceiling is not None and low is not None and low > ceiling:
        reasons.append(Reason(CODE, f"p95 latency at least {low:g}s (bound at level "
                                    f"{level:.2g}) over the ceiling {ceiling:g}s", low, ceiling))
    increase = thresholds.max_p95_latency_increase
    theirs = current.latency_histogram()
    if increase is not None and theirs and low is not None:
        _, high = quantile_bounds(theirs, 0.95, level)
        if high is not None and low > (1 + increase) * high:
            limit = (1 + increase) * high
            reasons.append(Reason(CODE, f"p95 latency at least {low:g}s, over current's p95 "
                                        f"(at most {high:g}s) +{increase:.0%} = {limit:g}s",
                                  low, limit))
    return reasons


def with_latency(arm: dict[str, Any], reasons: list[Reason]) -> dict[str, Any]:
    """The arm's gate JSON with the latency reasons added (a pass becomes a fail)."""
    if not reasons:
        return arm
    verdict = "fail" if arm.get("verdict") == "pass" else arm.get("verdict")
    return {**arm, "verdict": verdict,
            "reasons": [*arm.get("reasons", []), *(r.to_json() for r in reasons)]}
