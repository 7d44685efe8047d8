"""A fleet's budget of false rollbacks a day: what it asks of each rollout, and who is over. Pure.

A team sets it on the router (`ROLEGATE_FLEET_BUDGET`: expected false rollbacks a
day across the roles it serves) or asks `rolegate status --fleet-budget B`. By
linearity of expectation (`gatekeeper.stats.fleet`) a fleet running R rollouts a
day stays within B expected false rollbacks a day when each rollout's bound
(the stage alpha times its ladder's stages, the gate view's `rollout.alpha`) is
at most B / R. So the budget gives each rollout a share, B / R, and the stage
alpha that meets it on the default four-stage ladder; a live role whose bound
is over the share is listed with the `thresholds.alpha` that would bring it
within.

It is advice, never applied: a role's alpha is what its rollout promised when it
began, and a level rescaled as other roles' traffic comes and goes would be a
promise no single rollout could state (its e-values would be read against a
threshold that moved mid-rollout). The team sets the alpha it is shown.

R, the pace planned for: the rollouts that began in the last day, or the ones
live now if more, and at least one (`pace_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.stats.fleet import DEFAULT_STAGES, Outlook, alpha_for

#: Where a router's budget comes from, as every surface names it.
BUDGET_SOURCE = "ROLEGATE_FLEET_BUDGET"


@dataclass(frozen=True)
class OverBudget:
    """A live role whose rollout's bound is over its share of the fleet budget."""

    role: str
    #: Its `thresholds.alpha`, its rollout's bound, and the alpha that meets the share.
    alpha: float
    bound: float
    suggested: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"role": self.role, "alpha": self.alpha, "bound": self.bound,
                "suggested_alpha": self.suggested}


@dataclass(frozen=True)
class BudgetAdvice:
    """What a fleet budget asks of each rollout at the fleet's pace, and who is over it."""

    budget_per_day: float
    #: Rollouts a day planned for, and each one's share of the budget (a bound).
    pace: float
    per_rollout: float
    #: The stage alpha that meets the share on the default four-stage ladder.
    alpha: float
    over: tuple[OverBudget, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"budget_per_day": self.budget_per_day, "rollouts_per_day": self.pace,
                "per_rollout": self.per_rollout, "alpha": self.alpha,
                "stages": DEFAULT_STAGES, "applied": False,
                "over": [o.as_dict() for o in self.over]}

    def lines(self, source: str = "") -> list[str]:
        """What `rolegate status` and the overview say, a line each (`source`: where the
        budget was set, e.g. "ROLEGATE_FLEET_BUDGET")."""
        where = f" ({source})" if source else ""
        out = [(f"fleet budget{where}: {self.budget_per_day:g} false rollback(s) a day at "
                f"{self.pace:g} rollout(s) a day needs thresholds.alpha <= {self.alpha:.3g} "
                f"(a {DEFAULT_STAGES}-stage ladder; each rollout's bound <= "
                f"{self.per_rollout:.3g}); advice: no role's alpha is changed")]
        if not self.over:
            out.append("every live rollout is within its share of the budget")
        for o in self.over:
            out.append(f"over budget: {o.role} (thresholds.alpha {o.alpha:g}, rollout bound "
                       f"{o.bound:.3g}): set thresholds.alpha <= {o.suggested:.3g}")
        return out


def pace_of(fleet: Outlook) -> float:
    """Rollouts a day to plan for: the fleet's pace, the live ones if more, at least one."""
    return max(fleet.rollouts_per_day, float(fleet.live), 1.0)


def budget_advice(views: Iterable[Mapping[str, Any]], fleet: Outlook,
                  budget_per_day: float) -> BudgetAdvice:
    """The advice for `budget_per_day` over the gate views (`role`, `rollout.alpha`,
    `policy.thresholds.alpha`) whose outlook is `fleet`."""
    if not budget_per_day > 0.0:
        raise ValueError(f"the fleet budget must be positive, got {budget_per_day}")
    pace = pace_of(fleet)
    share = budget_per_day / pace
    over = []
    for view in views:
        rollout = view.get("rollout")
        bound = rollout.get("alpha") if isinstance(rollout, Mapping) else None
        if not isinstance(bound, (int, float)) or bound <= share:
            continue
        alpha = float(((view.get("policy") or {}).get("thresholds") or {}).get("alpha", 0.0))
        # The bound is alpha times the ladder's stages (capped): scale alpha by the same.
        over.append(OverBudget(str(view.get("role")), alpha, float(bound),
                               alpha * share / float(bound)))
    return BudgetAdvice(budget_per_day, pace, share,
                        alpha_for(budget_per_day, pace, DEFAULT_STAGES), tuple(over))
