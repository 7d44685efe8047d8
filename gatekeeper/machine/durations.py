"""How long a rollout stage must last before the gatekeeper may advance it. Pure.

Three settings can set the minimum, and the one that applies is named, so an
operator reads "holds until 12:05 UTC (bake_seconds)" rather than a bare number:

- `gate.thresholds.min_stage_seconds`: every stage;
- a canary step's own `min_seconds` (`steps: [{"share": 0.1, "min_seconds": 600}]`):
  overrides min_stage_seconds for that step, as Argo's canary steps pause for a
  duration; on the full stage the step whose share is 1 counts;
- `gate.thresholds.bake_seconds`: the full stage lasts at least this long too.
"""

from __future__ import annotations

from dataclasses import dataclass

from bindings.models import Binding, Stage


@dataclass(frozen=True)
class StageMinimum:
    """The stage's minimum duration in seconds, and the setting that sets it."""

    seconds: float
    setting: str


def stage_minimum(binding: Binding) -> StageMinimum:
    """The minimum duration of `binding`'s current stage, and which setting decides it."""
    thresholds = binding.gate.thresholds
    minimum = StageMinimum(thresholds.min_stage_seconds, "min_stage_seconds")
    if binding.stage in (Stage.CANARY, Stage.FULL):
        step = binding.step_min_seconds(binding.share)
        if step is not None:
            minimum = StageMinimum(step, f"steps[{binding.step_shares.index(binding.share)}]"
                                         ".min_seconds")
    if binding.stage is Stage.FULL and thresholds.bake_seconds > minimum.seconds:
        minimum = StageMinimum(thresholds.bake_seconds, "bake_seconds")
    return minimum
