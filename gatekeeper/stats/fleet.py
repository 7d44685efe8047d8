"""What a fleet of rollouts gets: expected false rollbacks, in total and per day. Pure.

Each rollout keeps its own promise: a candidate no worse than current is rolled
back with chance at most the stage alpha times the ladder's stages (1% with the
defaults, `budget`). A team running many roles runs many rollouts, and those
chances add up: 100 rollouts a day at 1% each expect up to one false rollback
a day. By linearity of expectation the fleet's expected false rollbacks are at
most the sum of its rollouts' bounds, however the rollouts overlap.

`outlook` reads that off the gate views `rolegate status` already fetches: the
live rollouts and their bounds (the view's `rollout.alpha`), the rollouts that
began in the last day (the pace), and, for a given number of rollouts a day,
the expected false rollbacks a day. `alpha_for` answers the other way round: the
stage alpha that keeps N rollouts a day within a fleet budget of false
rollbacks a day (a team sets it as `thresholds.alpha`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bindings.models import Thresholds

DAY_S = 86_400.0
#: The default ladder's stages (shadow, canary 0.1, canary 0.5, full).
DEFAULT_STAGES = 4


@dataclass(frozen=True)
class Outlook:
    """The fleet's rollouts now and over the last day, and their false-rollback bounds."""

    #: Rollouts live now, and the sum of their bounds (expected false rollbacks among them).
    live: int
    live_bound: float
    #: Rollouts that began in the last day, and the sum of their bounds.
    last_day: int
    last_day_bound: float
    #: The largest per-rollout bound among the live ones (None: none live).
    per_rollout: float | None
    #: rollouts_per_day (as asked, else the last day's) times the per-rollout bound.
    rollouts_per_day: float
    per_day: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"live": self.live, "live_bound": self.live_bound, "last_day": self.last_day,
                "last_day_bound": self.last_day_bound, "per_rollout": self.per_rollout,
                "rollouts_per_day": self.rollouts_per_day, "per_day": self.per_day}

    def text(self) -> str:
        """One line for `rolegate status`."""
        if self.per_rollout is None:
            head = "fleet: no rollout live"
        else:
            head = (f"fleet: {self.live} rollout(s) live, each rolls back a healthy candidate "
                    f"with chance <= {self.per_rollout:.2%}; expected false rollbacks among "
                    f"them <= {self.live_bound:.3g}")
        return (f"{head}; at {self.rollouts_per_day:g} rollout(s) a day, expected false "
                f"rollbacks per day <= {self.per_day:.3g}")


def outlook(views: Iterable[Mapping[str, Any]], now: float,
            rollouts_per_day: float | None = None) -> Outlook:
    """The fleet outlook from gate views (their `rollout` sections) at `now`.

    Without `rollouts_per_day` the pace is the rollouts that began in the last day.
    """
    bounds: list[float] = []
    recent: list[float] = []
    for view in views:
        section = view.get("rollout")
        if not isinstance(section, Mapping):
            continue
        alpha = section.get("alpha")
        if not isinstance(alpha, (int, float)):
            continue
        bounds.append(float(alpha))
        since = section.get("since")
        if isinstance(since, (int, float)) and now - since <= DAY_S:
            recent.append(float(alpha))
    per_rollout = max(bounds) if bounds else None
    pace = float(len(recent)) if rollouts_per_day is None else rollouts_per_day
    if rollouts_per_day is None:
        per_day = sum(recent)
    else:
        # No rollout live to read a bound from: the shipped defaults' (1%).
        per_day = rollouts_per_day * (per_rollout if per_rollout is not None
                                      else DEFAULT_STAGES * Thresholds().alpha)
    return Outlook(len(bounds), sum(bounds), len(recent), sum(recent), per_rollout, pace,
                   per_day)


def alpha_for(budget_per_day: float, rollouts_per_day: float,
              stages: int = DEFAULT_STAGES) -> float:
    """The stage alpha that keeps `rollouts_per_day` rollouts of `stages` stages within
    `budget_per_day` expected false rollbacks a day."""
    if budget_per_day <= 0.0 or rollouts_per_day <= 0.0 or stages < 1:
        raise ValueError("the budget, the rollouts a day and the stages must be positive")
    return min(0.5, budget_per_day / (rollouts_per_day * stages))
