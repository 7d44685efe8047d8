"""The gate view's `by_criterion` section: pass rates per criterion key and per arm.

Built by `gatekeeper.view.criteria` (the judged criteria added by
`view.judges.merge_judged`). decide() reads `gate`: per judged arm, each
criterion key's counts against current's (`stats.criteria_gate.KeyCounts`),
whose tests it recomputes at the stage's alpha.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gatekeeper.stats.criteria_gate import MODES, KeyCounts
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


def _unless_empty(value: str) -> bool:
    return not value


class CriterionKeyView(Section):
    """One criterion key of `gate`: its counts (`KeyCounts.as_dict`), then its test
    (`KeyVerdict.as_dict`; a view that carries counts alone leaves the test out)."""

    key: str
    #: Where the counts come from: "spec" (scored traces) or "judge".
    source: str = "spec"
    #: The judged arm's runs that passed and failed it, and current's.
    passed: int = 0
    failed: int = 0
    current_passed: int = 0
    current_failed: int = 0
    #: In shadow, on jobs both arms ran: current passed and the candidate failed (lost),
    #: and the reverse (gained); absent when not paired.
    lost: int | None = Field(None, exclude_if=lambda value: value is None)
    gained: int | None = Field(None, exclude_if=lambda value: value is None)
    #: A human reading of the loss ("4 cases lost the verifyIdentity call"), if any.
    message: str = Field("", exclude_if=_unless_empty)
    #: Why the key is held at observed whatever the policy says, if it is.
    held: str = Field("", exclude_if=_unless_empty)
    mode: str | None = Field(None, json_schema_extra={"enum": [*MODES, None]})
    #: "paired", "rate", "zero_tolerance", or null when there is nothing to test yet.
    test: str | None = None
    log_e: Number = 0.0
    threshold: Number = 0.0
    alpha: Number = 0.0
    reject: bool = False
    #: It rejects and its mode lets it act (observed keys never act).
    acts: bool = False

    def counts(self) -> KeyCounts:
        """The counts decide() tests (`KeyCounts.from_dict` of the same JSON)."""
        return KeyCounts(key=self.key, passed=self.passed, failed=self.failed,
                         current_passed=self.current_passed,
                         current_failed=self.current_failed, lost=self.lost,
                         gained=None if self.lost is None else (self.gained or 0),
                         source=self.source, message=self.message, held=self.held)


class CriterionTallyView(Section):
    """One criterion's tally on one arm (`checks.review.Tally.as_dict`)."""

    passed: int
    failed: int
    skipped: int
    n: int
    #: The pass rate over the scored cases and its 95% Wilson interval (null: none scored).
    rate: Number | None
    low: Number | None
    high: Number | None
    #: "judge" for a judged criterion's verdicts; absent for a scored one.
    source: str | None = Field(None, exclude_if=lambda value: value is None)


class CriterionArmView(Section):
    """One arm's config, the traces scored, and each criterion's tally."""

    config: str
    #: The config has a stored criteria spec (else only the invariants' criteria count).
    spec: bool
    n: int
    criteria: dict[str, CriterionTallyView]


class ByCriterionView(Section):
    """`by_criterion`: per arm each criterion's tally, the regressions against current, and the
    per-key evidence decide() gates on."""

    #: Newest traces scored per arm (null: counted from the stage's aggregates).
    sample: int | None = None
    arms: dict[str, CriterionArmView] = {}
    #: Criterion key -> its description, from the specs.
    descriptions: dict[str, str] = {}
    #: Per arm: the criteria it lost on (paired by job in shadow, else a rate drop whose
    #: 95% interval lies wholly below zero).
    regressions: dict[str, list[dict[str, Any]]] = {}
    #: Per judged arm: each key's counts against current, mode and test.
    gate: dict[str, list[CriterionKeyView]] = {}

    def keys_of(self, arm: str) -> tuple[KeyCounts, ...]:
        """The counts of `arm`'s criterion keys, as decide() tests them."""
        return tuple(key.counts() for key in self.gate.get(arm, ()))


def criteria_view(section: dict[str, Any] | ByCriterionView | None) -> ByCriterionView | None:
    """The section's JSON (its builder's, or a partial one) as the model."""
    if section is None or isinstance(section, ByCriterionView):
        return section
    return ByCriterionView.model_validate(section)
