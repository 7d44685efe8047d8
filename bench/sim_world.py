"""What a simulated rollout runs under and what comes of it: the traffic, the policy, the
read schedule (`World`, its `Tenant`s and `Shock`), who each job is and how each arm does
on it (`Traffic`), and the rollout's end (`Outcome`). `bench.sim_core` walks a rollout
through them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bindings.models import DEFAULT_HOLDBACK, GatePolicy, Stage
from gatekeeper.store.history import HISTORY_RUNS


@dataclass(frozen=True)
class Tenant:
    """A population of jobs: its share of the traffic and each arm's pass rate on it."""

    weight: float
    current: float
    candidate: float


@dataclass(frozen=True)
class Shock:
    """From `after_s` into the first `stage` the rollout enters, for `duration_s`: every
    run of both arms fails (`outage`), or both arms' pass rates fall by `drop`."""

    stage: str
    after_s: float
    duration_s: float = math.inf
    outage: bool = False
    drop: float = 0.0


@dataclass(frozen=True)
class World:
    """The traffic, the policy and the read schedule one rollout runs under."""

    base: float
    policy: GatePolicy
    rate: float = 1.0
    #: True: the gatekeeper reads after every run; False: every `interval` seconds.
    every_run: bool = True
    interval: float = 30.0
    rho: float = 0.5
    #: Current runs before the rollout (its stable history the view carries).
    history: int = HISTORY_RUNS
    #: False: the view has no `rollout` section, so each stage's tests start afresh
    #: at the stage alpha (the gate before evidence was carried across stages).
    carry: bool = True
    #: False: the view has no `concurrent` section (the gate before issue 23: the
    #: candidate against current's p0, its CUSUM against that p0).
    concurrent: bool = True
    #: Tenants (weight, current's pass rate, the candidate's); None: one, at (base, p).
    tenants: tuple[Tenant, ...] | None = None
    #: A targeting rule sends this tenant (an index) to the candidate in canary and full.
    rule_tenant: int | None = None
    #: Something that happens to both arms (an outage, the provider's model changing).
    shock: Shock | None = None
    #: Chance a run has a tool error (each arm's run on its own; every run in an outage).
    tool_error: float = 0.0
    #: The binding's holdback on current in `full`.
    holdback: float = DEFAULT_HOLDBACK
    #: (current's, the candidate's) chance a run reports; None: every run reports and
    #: the view has no `reports` section.
    reports: tuple[float, float] | None = None
    #: Per gated criterion key, (current's pass rate on it, the candidate's); each run
    #: passes each key on its own draw (paired across arms in shadow, as runs are).
    criteria: tuple[tuple[float, float], ...] = ()
    #: Seconds after which a rollout still undecided is given up ("undecided"): a hold
    #: that never reaches the deadline (both arms short of reports) would never end.
    horizon_s: float = 4 * 86_400.0


@dataclass(frozen=True)
class Outcome:
    """One rollout: rolled back or not, candidate runs and served jobs before the end."""

    rolled_back: bool
    runs: int
    served: int
    #: Where it ended: the stage it was rolled back in, "stable", "paused" (a stage
    #: past its deadline, held for a human) or "undecided" (still held at the horizon).
    stage: str
    #: When each stage ended (seconds from the rollout's start), the last one included.
    ends: tuple[float, ...] = field(default=(), compare=False)
    #: The last decision's reason (a rollback's says which test).
    reason: str = field(default="", compare=False)


class Traffic:
    """Who a job is, and how each arm does on it at a time: tenants, the rule, the shock."""

    def __init__(self, world: World, p: float) -> None:
        self.world = world
        self.tenants = world.tenants or (Tenant(1.0, world.base, p),)
        total = sum(t.weight for t in self.tenants)
        self.cumulative: list[float] = []
        acc = 0.0
        for tenant in self.tenants:
            acc += tenant.weight / total
            self.cumulative.append(acc)
        self.shock_at: float | None = None

    def enter(self, stage: Stage, now: float) -> None:
        """The rollout entered `stage` at `now`: a shock waiting for it is timed from here."""
        shock = self.world.shock
        if shock is not None and self.shock_at is None and stage.value == shock.stage:
            self.shock_at = now + shock.after_s

    def window(self) -> tuple[float, float]:
        """[from, to) of the shock in rollout seconds; empty when none is timed yet."""
        shock = self.world.shock
        if shock is None or self.shock_at is None:
            return math.inf, math.inf
        return self.shock_at, self.shock_at + shock.duration_s
