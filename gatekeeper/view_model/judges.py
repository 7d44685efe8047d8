"""The gate view's `judges` section: the role's judge, its day's spend, its verdicts per arm.

Built by `gatekeeper.view.judges` when the role's gate names a judge (never a
credential). decide() reads `wait`: why promotion waits for judged evidence.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class JudgeDayView(Section):
    """The UTC day's counters (`store.judging.JudgeStore.day`)."""

    queued: int
    skipped_full: int
    skipped_budget: int
    calls: int
    tokens: int
    judged: int
    errors: int
    requeued: int
    #: Runs in the queue, and claims held.
    waiting: int
    claimed: int
    last_error: str | None


class JudgeBudgetView(Section):
    """The day's limits, which of them are spent, and what that means."""

    calls: int
    tokens: int
    exhausted: list[str]
    message: str | None


class VerdictCountView(Section):
    """One judge criterion's verdicts on one arm."""

    passed: int
    failed: int


class AgreementView(Section):
    """The judge's agreement on one criterion with humans' feedback (or with itself)."""

    agree: int
    disagree: int
    n: int
    rate: Number | None


class JudgesView(Section):
    """`judges`: the judge's settings, the day's counters and budget, the verdicts per arm."""

    url: str
    model: str
    #: Per arm: the share of its runs sampled for the judge in this stage.
    rates: dict[str, Number]
    day: JudgeDayView
    budget: JudgeBudgetView
    #: arm -> judge criterion -> verdicts over the stage.
    arms: dict[str, dict[str, VerdictCountView]]
    min_judged: int | None
    #: Why promotion waits for judged evidence on the judged arm; null: it does not.
    wait: str | None
    #: source ("human", "self") -> criterion -> agreement.
    agreement: dict[str, dict[str, AgreementView]]
    min_agreement: Number | None
    min_agreement_runs: int
    #: Blind pairwise judging in shadow: the rate, the pair tally, its flip test and the
    #: failure it finds (`stats.pairwise_gate`); absent unless the judge pairs runs.
    pairwise: dict[str, Any] | None = Field(None, exclude_if=lambda value: value is None)


def judges_view(section: dict[str, Any] | JudgesView | None) -> JudgesView | None:
    """The section's JSON as the model."""
    if section is None or isinstance(section, JudgesView):
        return section
    return JudgesView.model_validate(section)
