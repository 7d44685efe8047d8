"""The power hold: a stage advances only once the gate could have caught a regression. Pure.

decide() reads the gate view's evidence (the stage's comparison with concurrent
current, shadow's pairs, the rollout's earlier stages, current's carried
history) and asks `gatekeeper.stats.power` how likely the rollout's tests would
have been to roll back a candidate worse by the policy's regression
(`gate.power`, `bindings.power_policy`) over the runs so far. Under
`min_power` the stage holds with the figures, and its deadline
(`machine.deadline`) ends a wait that traffic cannot.

Only a view with the `concurrent` section is held (an older router's view has
no comparison to size); `gate.power: null` or `min_power: 0` turns it off.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from bindings.models import Binding, Stage
from gatekeeper.stats.budget import SEQUENTIAL_SHARE, weights
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.stats.power import Paired, Power, Unpaired, power_of
from gatekeeper.stats.rollout import Carried, rollout_alpha
from gatekeeper.view_model.concurrent import ConcurrentView
from gatekeeper.view_model.paired import PairedView


class Evidence(Protocol):
    """The fields of `decide.Evidence` read here (decide imports this module)."""

    @property
    def concurrent(self) -> ConcurrentView | None: ...

    @property
    def paired(self) -> PairedView | None: ...

    @property
    def carried(self) -> Carried | None: ...

    @property
    def baseline_failure(self) -> float | None: ...

    @property
    def baseline_runs(self) -> int: ...

    @property
    def baseline_observed(self) -> float | None: ...


def rollout_power(binding: Binding, evidence: Evidence, scale: float = 1.0) -> Power | None:
    """The power of the rollout's evidence so far; None when the hold does not apply.

    `scale` multiplies this stage's runs and pairs: the power after that much more of
    the same traffic (`more_runs`).
    """
    policy = binding.gate.power
    if policy is None or policy.min_power <= 0.0 or evidence.concurrent is None:
        return None
    carried = evidence.carried if evidence.carried is not None and evidence.carried.complete \
        else None
    earlier = carried.stages if carried is not None else ()
    stage = evidence.concurrent.comparison(RUN_FAILURE)
    comparisons = [(s.concurrent.candidate_n, s.concurrent.current_n, s.concurrent.current_events)
                   for s in earlier]
    comparisons.append((round(stage.candidate_n * scale), round(stage.current_n * scale),
                        round(stage.current_events * scale)))
    began = carried.began if carried is not None else binding.stage
    shadow = None
    if began is Stage.SHADOW:
        pairs = discordant = 0
        for s in earlier:
            if s.stage is Stage.SHADOW:
                pairs, discordant = pairs + s.n, discordant + s.regressions + s.improvements
        if binding.stage is Stage.SHADOW and evidence.paired is not None:
            paired = evidence.paired
            pairs += round(paired.pairs * scale)
            discordant += round((paired.regressions + paired.improvements) * scale)
        shadow = Paired(pairs, discordant)
    failures = sum(c[2] for c in comparisons)
    runs = sum(c[1] for c in comparisons)
    if evidence.baseline_failure is not None and evidence.baseline_runs > 0:
        # current's carried history sizes the alternative (never a rollback): the failures
        # its runs showed, not the upper bound the rate tests take. The alternative is a
        # multiple of current's rate (`risk`), so a bound above the rate would ask the hold
        # for a larger, easier regression: at 0.9999 over 5,000 runs the bound is several
        # times the rate, and the hold let shadow go after 2,000 pairs.
        rate = evidence.baseline_observed
        failures += round((evidence.baseline_failure if rate is None else rate)
                          * evidence.baseline_runs)
        runs += evidence.baseline_runs
    level = rollout_alpha(binding) if carried is not None else binding.gate.thresholds.alpha
    threshold = math.log(1.0 / (SEQUENTIAL_SHARE * level))
    return power_of(shadow, [Unpaired(c[0], c[1]) for c in comparisons], (failures, runs),
                    threshold, weights(began, floor=False, concurrent=True), policy)


#: The most this stage's traffic is scaled by when estimating the runs power needs.
MAX_SCALE = 1000.0


def more_runs(binding: Binding, evidence: Evidence, runs: int) -> int | None:
    """About how many more of this stage's judged runs (of `runs` so far) the hold needs,
    at the same traffic; None when even a thousandfold would not do."""
    if runs <= 0:
        return None
    low, high = 1.0, MAX_SCALE
    top = rollout_power(binding, evidence, high)
    if top is None or not top.enough:
        return None
    for _ in range(30):
        middle = (low * high) ** 0.5
        found = rollout_power(binding, evidence, middle)
        if found is not None and found.enough:
            high = middle
        else:
            low = middle
        if high / low < 1.02:
            break
    return max(1, math.ceil(runs * (high - 1.0)))


def power_wait(binding: Binding, evidence: Evidence) -> tuple[str, dict[str, Any]] | None:
    """(reason, details) while the power hold keeps the stage; None once it may advance."""
    found = rollout_power(binding, evidence)
    if found is None or found.enough:
        return None
    return found.reason(), {"power": found.as_dict()}
