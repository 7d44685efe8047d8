"""The gate view's `paired` section: shadow's runs paired by job with current's (`view.sections`).

In shadow only: the running tally's report (`stats.pairing.PairedReport.as_dict`),
how far the tally has read, and, when the pairwise judge fails the candidate, its
failure (`view.judges.merge_pairwise`: `blocking` then becomes true). decide()
reads the verdict, the flips, the pairs and the McNemar figures.

Every field has a default: tests and the simulators hand decide() reports of
several partial shapes ({"verdict", "reasons"}, {"pairs", "flips"}); they are
validated into this model, and the figures a decision keeps are the fields they
gave (`recorded`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from gatekeeper.view_model.rollout import FlipsView
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class AgreeView(Section):
    """Pairs whose two runs agreed: both passed, both failed."""

    # "pass" is a Python keyword: the field is `passed`, served and read as "pass".
    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    passed: int = Field(alias="pass")
    fail: int


class McNemarView(Section):
    """The exact McNemar p-values over the flips (read once, at the stage's end)."""

    one_sided: Number
    two_sided: Number


class BlockedPairView(Section):
    """A pair whose shadow run lost a tool the policy requires."""

    key: str
    lost: list[str]


class LastIdsView(Section):
    """The last stream ids the tally counted per arm (null before the first)."""

    current: str | None
    shadow: str | None


class PairedView(Section):
    """`paired`: shadow's flips against current on the same jobs, the McNemar test, the verdict."""

    pairs: int = 0
    flips: FlipsView = FlipsView(pass_to_fail=0, fail_to_pass=0)
    agree: AgreeView | None = None
    mcnemar: McNemarView | None = None
    #: Trajectory change (SAME, MISSING_CALL, ...) -> pairs.
    trajectory: dict[str, int] = {}
    #: Keys that flipped (the first 50 of each).
    regressed_keys: list[str] = []
    improved_keys: list[str] = []
    #: The pairs that lost a required tool; true when the pairwise judge failed the candidate.
    blocking: list[BlockedPairView] | bool = []
    verdict: str = Field("insufficient", json_schema_extra={
        "enum": ["pass", "fail", "insufficient"]})
    reasons: list[str] = []
    #: False while the tally is still behind the stage's runs.
    caught_up: bool = True
    #: Per arm: keys whose runs wait for a mate, and keys dropped waiting.
    waiting: dict[str, int] = {}
    dropped: dict[str, int] = {}
    last_ids: LastIdsView | None = None

    @property
    def regressions(self) -> int:
        """Pairs where current passed and shadow failed."""
        return self.flips.pass_to_fail

    @property
    def improvements(self) -> int:
        """Pairs where current failed and shadow passed."""
        return self.flips.fail_to_pass

    def recorded(self) -> dict[str, Any]:
        """The figures a decision's details keep: pairs, flips and McNemar, those given."""
        return self.model_dump(mode="json", include={"pairs", "flips", "mcnemar"}
                               & self.model_fields_set)


def paired_view(section: dict[str, Any] | PairedView | None) -> PairedView | None:
    """A paired report's JSON (the section's builder's, or a partial one) as the model."""
    if section is None or isinstance(section, PairedView):
        return section
    return PairedView.model_validate(section)
