"""p95 steps gated against a ceiling and against current, at the stage's one look.

Steps were a point estimate read once: the arm's p95 over `p95_step_ceiling`
failed it, however few runs sat over the line. Now, as p95 latency
(`gatekeeper.view.latency`), the judged arm's p95 steps fail only when their
distribution-free lower bound (`gatekeeper.stats.quantiles`) is over the
ceiling, or over (1 + `max_p95_steps_increase`) times current's p95 upper
bound; each bound at half the stage's one-look level (`budget.final_alpha`),
so an arm whose p95 is within the line is failed with chance at most that
level. The reason is rated (code `p95_steps`): decide() acts on it at the
stage's end.
"""

from __future__ import annotations

from bindings.models import Stage, Thresholds
from gatekeeper.gate import Reason
from gatekeeper.stats.budget import final_alpha
from gatekeeper.stats.quantiles import quantile_bounds
from gatekeeper.window import WindowStats

CODE = "p95_steps"


def _counts(window: WindowStats) -> dict[float, int]:
    return {float(k): v for k, v in window.steps_histogram().items()}


def step_reasons(judged: WindowStats, current: WindowStats | None, thresholds: Thresholds,
                 stage: Stage) -> list[Reason]:
    """The judged arm's p95 steps reasons against the ceiling and (given) against current."""
    mine = _counts(judged)
    if not mine or judged.n < thresholds.min_samples:
        # Rated, like the rest: read with enough runs, never before min_samples.
        return []
    level = final_alpha(thresholds.alpha, stage) / 2
    low, _ = quantile_bounds(mine, 0.95, level)
    reasons = []
    ceiling = thresholds.p95_step_ceiling
    if ceiling is not None and low is not None and low > ceiling:
        reasons.append(Reason(CODE, f"p95 steps at least {low:g} (bound at level {level:.2g}) "
                                    f"over the ceiling {ceiling}", low, float(ceiling)))
    increase = thresholds.max_p95_steps_increase
    theirs = _counts(current) if current is not None else {}
    if increase is not None and theirs and low is not None:
        _, high = quantile_bounds(theirs, 0.95, level)
        if high is not None and low > (1 + increase) * high:
            limit = (1 + increase) * high
            reasons.append(Reason(CODE, f"p95 steps at least {low:g}, over current's p95 "
                                        f"(at most {high:g}) +{increase:.0%} = {limit:g}",
                                  low, limit))
    return reasons
