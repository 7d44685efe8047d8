"""The gate view's `rollout` section: the earlier stages of the rollout (`gatekeeper.view.rollout`)."""

from __future__ import annotations

from pydantic import Field

from bindings.models import Stage
from gatekeeper.view_model.concurrent import CellComparisonView
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class FlipsView(Section):
    """Shadow's discordant pairs: the candidate failed where current passed, and back."""

    pass_to_fail: int
    fail_to_pass: int


class EarlierStageView(Section):
    """One earlier stage of the rollout (`stats.rollout.EarlierStage`)."""

    stage: Stage
    share: Number
    since: Number | None
    epoch: str
    #: The candidate's runs and passes in that stage.
    n: int
    passes: int
    #: Its run failures against concurrent current's (`stats.concurrent.Comparison`).
    concurrent: CellComparisonView
    #: Shadow's flips; absent for a canary or full stage.
    flips: FlipsView | None = Field(None, exclude_if=lambda value: value is None)


class CarriedView(Section):
    """The earlier stages' sums the current stage's tests carry on."""

    n: int
    passes: int
    flips: FlipsView


class RolloutView(Section):
    """`rollout`: the rollout the stage belongs to (`stats.rollout.Carried`)."""

    #: The rollout's first stage, and when it began.
    began: Stage
    since: Number | None
    #: False when the history was cut before the rollout began.
    complete: bool
    #: The rollout's level (`stats.rollout.rollout_alpha`).
    alpha: Number
    #: Each earlier stage, oldest first.
    stages: list[EarlierStageView]
    carried: CarriedView
