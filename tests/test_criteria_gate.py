"""The per-criterion gate (gatekeeper.stats.criteria_gate) and decide() reading it. Pure."""

from __future__ import annotations

import math
import random

from bindings.models import Binding, Stage, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide, evidence_from_view
from gatekeeper.stats.budget import (
    CRITERIA_SHARE,
    CUSUM_SHARE,
    FINAL_SHARE,
    SEQUENTIAL_SHARE,
    SHARES,
)
from gatekeeper.stats.criteria_gate import (
    BLOCKING,
    GATED,
    OBSERVED,
    KeyCounts,
    criteria_tests,
)
from gatekeeper.stats.sequential import log_ratio
from gatekeeper.view_model import GateView, arms_view
from gatekeeper.view_model.criteria import criteria_view
from gatekeeper.view_model.paired import paired_view

ALPHA = 0.0025


def _record(criteria: dict[str, str] | None = None, stage: str = "shadow") -> VersionedBinding:
    binding = Binding.model_validate({
        "current": "a", "candidate": "b", "stage": stage, "share": 0.1 if stage == "canary" else 0,
        "stage_since": 0.0,
        "gate": {"criteria": criteria or {},
                 "thresholds": {"min_samples": 20, "min_stage_seconds": 0.0}}})
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=0.0,
                            updated_by="t")


def test_the_shares_still_add_up_to_the_stage_alpha() -> None:
    """The criteria's share is carved out of the stage alpha, not added to it."""
    assert math.isclose(SEQUENTIAL_SHARE + CRITERIA_SHARE + CUSUM_SHARE + FINAL_SHARE
                        + SHARES["reports"] + SHARES["pairwise"], 1.0)


def test_paired_losses_reject_only_past_the_keys_share_of_alpha() -> None:
    """Five gated keys share 0.1 alpha: 4 lost cases are not enough, 25 are; the key is named."""
    quiet = [KeyCounts(f"k{i}", 10, 0, 10, 0, 0, 0) for i in range(4)]
    few = criteria_tests([*quiet, KeyCounts("escalation:x", 0, 4, 4, 0, 4, 0)], {}, ALPHA)
    assert not any(v.reject for v in few)
    many = criteria_tests([*quiet, KeyCounts("escalation:x", 0, 25, 25, 0, 25, 0)], {}, ALPHA)
    top = many[0]
    assert top.counts.key == "escalation:x" and top.acts and top.test == "paired"
    assert math.isclose(top.threshold, math.log(5 / (CRITERIA_SHARE * ALPHA)))
    assert math.isclose(top.log_e, log_ratio(25, 0))
    assert top.reason().startswith("criterion escalation:x: lost on 25 jobs current passed")
    assert [v.reject for v in many[1:]] == [False] * 4


def test_blocking_fails_on_one_candidate_failure_and_observed_never_acts() -> None:
    """Zero tolerance as a forbidden tool; observed keys are tested and shown but never act."""
    counts = [KeyCounts("a", 9, 1, 10, 0), KeyCounts("b", 0, 40, 40, 0, 40, 0)]
    verdicts = {v.counts.key: v for v in criteria_tests(counts, {"a": BLOCKING,
                                                                 "b": OBSERVED}, ALPHA)}
    assert verdicts["a"].acts and verdicts["a"].mode == BLOCKING
    assert verdicts["a"].reason().startswith("criterion a (blocking): failed 1 of 10")
    assert verdicts["b"].reject and not verdicts["b"].acts
    clean = criteria_tests([KeyCounts("a", 10, 0, 10, 0)], {"a": BLOCKING}, ALPHA)
    assert not clean[0].acts


def test_unpaired_rate_test_against_currents_rate_on_the_key() -> None:
    """On a canary: the candidate's failures on the key against current's, at its upper bound."""
    worse = criteria_tests([KeyCounts("k", 100, 100, 400, 0)], {}, ALPHA)[0]
    assert worse.test == "rate" and worse.acts
    same = criteria_tests([KeyCounts("k", 190, 10, 380, 20)], {}, ALPHA)[0]
    assert same.test == "rate" and not same.reject
    nothing = criteria_tests([KeyCounts("k", 5, 5, 0, 0)], {}, ALPHA)[0]
    assert nothing.test is None and not nothing.reject


def test_a_healthy_candidate_is_rarely_rejected_however_often_it_is_read() -> None:
    """Null flips (each discordant pair a coin toss), read after every pair: under the level."""
    rng = random.Random(7)
    level_alpha = 0.2  # large, so that the false-rejection rate is measurable
    rejected = 0
    trials = 400
    for _ in range(trials):
        lost = gained = 0
        for _ in range(300):
            if rng.random() < 0.5:
                lost += 1
            else:
                gained += 1
            if criteria_tests([KeyCounts("k", 0, 0, 0, 0, lost, gained)], {}, level_alpha)[0] \
                    .reject:
                rejected += 1
                break
    assert rejected / trials <= CRITERIA_SHARE * level_alpha + 0.01


def test_decide_rolls_back_naming_the_key_and_reads_it_from_the_view() -> None:
    """decide() recomputes the tests from the view's counts; observed keeps the stage moving."""
    # The sections decide() reads (model_construct: the others left out).
    view = GateView.model_construct(
        stage=Stage.SHADOW, version=3,
        arms=arms_view({"shadow": {"verdict": "pass", "reasons": [], "n": 40, "passes": 40},
                        "current": {"verdict": "pass", "reasons": [], "n": 40, "passes": 40}}),
        paired=paired_view({"pairs": 40, "flips": {"pass_to_fail": 0, "fail_to_pass": 0}}),
        by_criterion=criteria_view({"gate": {"shadow": [
            {"key": "escalation:high-value", "passed": 0, "failed": 30, "current_passed": 30,
             "current_failed": 0, "lost": 30, "gained": 0,
             "message": "30 cases lost the verifyIdentity call"}]}}))
    evidence = evidence_from_view(view)
    assert evidence.criteria[0].lost == 30
    decision = decide("r", _record(), evidence, now=100.0)
    assert decision.action is Action.ROLLBACK
    assert decision.reason.startswith(
        "criterion escalation:high-value: 30 cases lost the verifyIdentity call")
    observed = decide("r", _record({"escalation:high-value": OBSERVED}), evidence, now=100.0)
    assert observed.action is Action.ADVANCE, observed.reason
    blocking = decide("r", _record({"escalation:high-value": BLOCKING}),
                      Evidence(verdict="insufficient_data", n=2, passes=2,
                               criteria=(KeyCounts("escalation:high-value", 0, 1, 1, 0, 1, 0),)),
                      now=100.0)
    assert blocking.action is Action.ROLLBACK
    assert "criterion escalation:high-value (blocking)" in blocking.reason
    assert GATED == "gated" and Stage.SHADOW.value == "shadow"


def test_a_held_key_is_observed_in_decide_whatever_the_policy() -> None:
    """A judged key the judge is not trusted on (view's `held`) never acts, even when blocking."""
    raw = {"key": "instruction:tone", "passed": 0, "failed": 40, "current_passed": 40,
           "current_failed": 0, "source": "judge", "held": "observed until ..."}
    counts = KeyCounts.from_dict(raw)
    assert counts.held and counts.as_dict()["held"] == "observed until ..."
    (verdict,) = criteria_tests([counts], {"instruction:tone": BLOCKING}, ALPHA)
    assert verdict.mode == OBSERVED and not verdict.acts
