"""Why a stage may not take its one look yet: decide()'s holds (rule 5), each written once. Pure.

`holds` finds every hold the stage has not met, in decide()'s order: too few
runs, too few shadow pairs, too short a stage, the judge's wait, a pass rate
under the floor, too little power. decide() holds on the first, and its
Decision carries the waits they explain (`Decision.waits`), so the gate view's
`next`, `rolegate status` and the dashboard render what decide() found instead
of working it out again. A hold has a `Wait` (what it waits for, with its
numbers and the setting behind them) when there is more to say than decide()'s
reason; the judge's wait and the pass-rate floor have none (the reason says it
all: `other_wait`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from bindings.models import Binding, Stage, Thresholds
from gatekeeper.machine import power_hold
from gatekeeper.machine.durations import stage_minimum
from gatekeeper.machine.power_hold import rollout_power

#: Every kind of Wait, in the order holds lists them ("approval" on its own; "other":
#: a hold decide() explains only in its reason). A Wait of another kind is refused; the
#: OpenAPI enum of `next.waits[].kind` is this tuple (`view_model.next`).
WAIT_KINDS = ("runs", "pairs", "time", "power", "approval", "other")


class Evidence(power_hold.Evidence, Protocol):
    """The fields of `evidence.Evidence` read here (a protocol: `evidence` reads the gate
    view's model, whose `next` section names WAIT_KINDS)."""

    @property
    def verdict(self) -> str: ...

    @property
    def reasons(self) -> tuple[str, ...]: ...

    @property
    def n(self) -> int: ...

    @property
    def judged_wait(self) -> str | None: ...


@dataclass(frozen=True)
class Wait:
    """One condition a stage still waits for before it may advance."""

    #: One of WAIT_KINDS.
    kind: str
    #: The binding setting that asks for it: min_samples, min_stage_seconds, ...
    setting: str | None
    have: float
    need: float
    text: str
    #: For "time": when the wait ends, in epoch seconds.
    until: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in WAIT_KINDS:  # the OpenAPI enum is WAIT_KINDS: keep them one list
            raise ValueError(f"Wait kind {self.kind!r} is not one of {WAIT_KINDS}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"kind": self.kind, "setting": self.setting, "have": self.have,
                "need": self.need, "until": self.until, "text": self.text}


@dataclass(frozen=True)
class Hold:
    """One hold the stage has not met: decide()'s reason and figures, and what it waits for."""

    #: decide()'s reason when it holds on this one.
    reason: str
    #: What it waits for; None when the reason says it all, or (power, before a cell
    #: both arms ran in has closed) when there is nothing to size yet.
    wait: Wait | None
    #: Figures decide() keeps in the Decision's details when it holds on this one.
    details: Mapping[str, Any] = field(default_factory=dict)


def shadow_pairs_needed(thresholds: Thresholds) -> int:
    """Paired runs shadow needs before it may pass: min_shadow_pairs, else min_samples."""
    if thresholds.min_shadow_pairs is None:
        return thresholds.min_samples
    return max(thresholds.min_samples, thresholds.min_shadow_pairs)


def holds(binding: Binding, evidence: Evidence, under_floor: str | None,
          now: float) -> tuple[Hold, ...]:
    """Every hold of `binding`'s stage not met on `evidence` at `now`, in decide()'s order.

    `under_floor`: the gate's pass-rate reason when the pass rate is under
    `min_pass_rate` (it holds promotion, it never rolls back), else None.
    """
    found = [*_counts(binding, evidence), *_duration(binding, now)]
    if evidence.judged_wait:
        found.append(Hold(evidence.judged_wait, None))
    if under_floor is not None:
        found.append(Hold(f"{under_floor}; " + (
            "held: min_pass_rate holds promotion, it does not roll back"
            if evidence.concurrent is not None else "not yet excluded by the floor test"), None))
    # Last: the pass rate under the floor says more than the power still missing.
    power = rollout_power(binding, evidence)
    if power is not None and not power.enough:
        # Before a cell both arms ran in has closed there is nothing to size: the wait
        # would be noise beside the runs and time the stage still waits for.
        shown = power.sd > 0.0 or not any(hold.wait is not None for hold in found)
        found.append(Hold(power.reason(), Wait(
            "power", "gate.power.min_power", round(power.power, 3), power.needed,
            power.reason()) if shown else None, {"power": power.as_dict()}))
    return tuple(found)


def _counts(binding: Binding, evidence: Evidence) -> list[Hold]:
    """Too few runs (the gate's data reasons), too few shadow pairs."""
    found: list[Hold] = []
    thresholds = binding.gate.thresholds
    if evidence.verdict not in ("pass", "fail"):
        reason = "waiting for data: " + "; ".join(evidence.reasons)
        need = thresholds.min_samples
        found.append(Hold(reason, Wait(
            "runs", "min_samples", evidence.n, need,
            f"needs {need - evidence.n} more {judged_arm(binding)} runs (min_samples {need})")
            if evidence.n < need else Wait("runs", None, evidence.n, need, reason)))
    paired = evidence.paired if binding.stage is Stage.SHADOW else None
    if paired is not None:
        pairs, need = paired.pairs, shadow_pairs_needed(thresholds)
        setting = "min_shadow_pairs" if thresholds.min_shadow_pairs is not None \
            else "min_samples"
        if pairs < need:
            found.append(Hold(f"waiting for pairs: {pairs} of min_shadow_pairs {need}", Wait(
                "pairs", setting, pairs, need,
                f"needs {need - pairs} more paired runs ({setting} {need})")))
    return found


def _duration(binding: Binding, now: float) -> list[Hold]:
    """The stage has not lasted its minimum (`machine.durations`)."""
    minimum = stage_minimum(binding)
    since = binding.stage_since if binding.stage_since is not None else now
    elapsed = now - since
    if elapsed >= minimum.seconds:
        return []
    until = since + minimum.seconds
    return [Hold(f"stage has lasted {elapsed:.0f}s of {minimum.seconds:.0f}s",
                 Wait("time", minimum.setting, round(elapsed, 3), minimum.seconds,
                      f"holds until {clock_time(until, now)} ({minimum.setting})", until=until),
                 {"elapsed_s": round(elapsed, 3), "required_s": minimum.seconds})]


def judged_arm(binding: Binding) -> str:
    """The arm whose runs the stage judges: shadow in shadow, else the candidate."""
    return "shadow" if binding.stage is Stage.SHADOW else "candidate"


def other_wait(reason: str) -> Wait:
    """A hold decide() explains only in its reason."""
    return Wait("other", None, 0, 0, f"holds: {reason}")


def waits_shown(found: tuple[Hold, ...]) -> tuple[Wait, ...]:
    """The waits of `found` (a hold with no Wait of its own shows in decide()'s reason)."""
    return tuple(hold.wait for hold in found if hold.wait is not None)


def clock_time(moment: float, now: float) -> str:
    """`moment` as "12:05 UTC", with the date when it is not today (UTC).

    Rounded up to the minute: "holds until 12:05" must not read as already over at 12:04:30.
    """
    moment = math.ceil(moment / 60) * 60
    day, today = time.gmtime(moment)[:3], time.gmtime(now)[:3]
    form = "%H:%M UTC" if day == today else "%Y-%m-%d %H:%M UTC"
    return time.strftime(form, time.gmtime(moment))
