"""Golden sets: tier quotas, the too-recent rule, references from corrections, flagged cases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from gatekeeper.checks.golden import Feedback, select, to_scenario, with_inline
from gatekeeper.checks.reference import score
from gatekeeper.suite.scenario import Scenario
from rolegate.trace import Trace

STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}
DAY = 86400.0
NOW = 100 * DAY


def trace(run_id: str, age_days: float, *, config: str = "cfg_a",
          output: str = '{"decision": "refund"}', input: dict[str, Any] | None = None) -> Trace:
    """A refunds trace `age_days` old."""
    return Trace(run_id=run_id, role="refunds", config=config, arm="current",
                 tools=("lookupOrder",), output_text=output, stamps=STAMPS,
                 input=input if input is not None else {"task": f"refund {run_id}", "amount": 10},
                 time=NOW - age_days * DAY)


def fb(run_id: str, tier: str, correction: Any = None, *, at: float = NOW,
       reviewer: str = "rita") -> Feedback:
    """One feedback entry."""
    return Feedback(run_id=run_id, tier=tier, reviewer=reviewer, time=at, correction=correction)


def test_each_tier_keeps_its_quota_so_rare_corrections_survive() -> None:
    """500 routine cases and 6 corrected ones: the quota keeps every correction, caps the rest."""
    traces = [trace(f"n{i}", 5) for i in range(500)]
    traces += [trace(f"c{i}", 5) for i in range(6)]
    traces += [trace(f"p{i}", 5) for i in range(40)]
    feedback = {f"c{i}": [fb(f"c{i}", "negative", {"decision": "deny"})] for i in range(6)}
    feedback |= {f"p{i}": [fb(f"p{i}", "positive")] for i in range(40)}
    golden = select(traces, feedback, config="cfg_a", now=NOW,
                    quotas={"no_feedback": 10, "positive": 5, "negative_corrected": 20})
    by_tier: dict[str, int] = {}
    for case in golden.cases:
        by_tier[case.tier] = by_tier.get(case.tier, 0) + 1
    assert by_tier == {"negative_corrected": 6, "positive": 5, "no_feedback": 10}
    assert golden.tiers["no_feedback"] == {"available": 500, "taken": 10, "quota": 10}
    assert golden.tiers["positive"]["available"] == 40


def test_too_recent_cases_stay_out_of_the_no_feedback_tier() -> None:
    """An unreviewed case younger than min_age is excluded; one with feedback is not."""
    traces = [trace("fresh", 0.5), trace("fresh-flagged", 0.5), trace("old", 3)]
    feedback = {"fresh-flagged": [fb("fresh-flagged", "negative")]}
    golden = select(traces, feedback, config="cfg_a", now=NOW, min_age_s=2 * DAY)
    assert {(c.trace.run_id, c.tier) for c in golden.cases} == {
        ("fresh-flagged", "negative"), ("old", "no_feedback")}
    assert golden.excluded["too_recent"] == 1


def test_only_current_policy_and_recent_cases_are_eligible() -> None:
    """Other configs, cases before the policy changed and stale ones are left out and counted."""
    traces = [trace("a", 3), trace("other", 3, config="cfg_b"), trace("before", 20),
              trace("ancient", 90), trace("no-input", 3, input={})]
    golden = select(traces, {}, config="cfg_a", now=NOW, policy_since=NOW - 10 * DAY,
                    window_s=30 * DAY)
    assert [c.trace.run_id for c in golden.cases] == ["a"]
    assert golden.excluded == {"other_config": 1, "old_policy": 2, "stale": 0,
                               "too_recent": 0, "no_input": 1}


def test_correction_overrides_the_recorded_outcome() -> None:
    """A human correction is the reference; positive or no feedback keep the accepted outcome."""
    traces = [trace("wrong", 5), trace("right", 5), trace("silent", 5), trace("text", 5,
                                                                            output="Refunded.")]
    feedback = {
        "wrong": [fb("wrong", "negative", at=NOW - 4 * DAY),
                  fb("wrong", "negative_corrected", {"decision": "deny"}, at=NOW - 3 * DAY)],
        "right": [fb("right", "positive")],
    }
    cases = {c.trace.run_id: c for c in select(traces, feedback, config="cfg_a", now=NOW).cases}
    assert (cases["wrong"].tier, cases["wrong"].reference, cases["wrong"].reference_source) == (
        "negative_corrected", {"decision": "deny"}, "correction")
    assert cases["right"].reference == {"decision": "refund"}
    assert cases["silent"].reference_source == "accepted"
    assert cases["text"].reference == "Refunded."


def test_negative_without_correction_has_no_reference() -> None:
    """A case judged wrong with no correction is sampled but never scored against its own output."""
    golden = select([trace("bad", 5)], {"bad": [fb("bad", "negative")]}, config="cfg_a", now=NOW)
    assert (golden.cases[0].reference, golden.cases[0].reference_source) == (None, "none")


@pytest.mark.parametrize("notes, reason", [
    ([("positive", None, "ann"), ("negative", None, "bob")], "both positive and negative"),
    ([("negative", {"decision": "deny"}, "ann"), ("negative", {"decision": "escalate"}, "bob")],
     "conflicting corrections"),
    ([("reprocessed", None, "ann"), ("reprocessed", None, "bob")], "reprocessed 2 times"),
])
def test_conflicting_or_ambiguous_feedback_is_flagged_not_included(
        notes: list[tuple[str, Any, str]], reason: str) -> None:
    """Conflicting tiers, differing corrections and repeated reprocessing go to a human."""
    feedback = {"x": [fb("x", t, c, reviewer=r) for t, c, r in notes]}
    golden = select([trace("x", 5)], feedback, config="cfg_a", now=NOW)
    assert golden.cases == ()
    assert golden.flagged[0].run_id == "x" and reason in golden.flagged[0].reason


def test_feedback_model_refuses_a_tier_and_correction_that_disagree() -> None:
    """negative_corrected needs a correction; positive may not carry one."""
    with pytest.raises(ValidationError, match="needs the human correction"):
        fb("x", "negative_corrected")
    with pytest.raises(ValidationError, match="takes no correction"):
        fb("x", "positive", {"decision": "deny"})
    assert fb("x", "negative", {"decision": "deny"}).tier == "negative_corrected"


def test_sample_is_stable_when_new_traffic_arrives() -> None:
    """Adding traces never evicts a case for a lower-ranked one: the hash order is fixed."""
    first = select([trace(f"n{i}", 5) for i in range(50)], {}, config="cfg_a", now=NOW,
                   quotas={"no_feedback": 5})
    more = select([trace(f"n{i}", 5) for i in range(80)], {}, config="cfg_a", now=NOW,
                  quotas={"no_feedback": 5})
    kept = {c.trace.run_id for c in first.cases}
    old_ids = {f"n{i}" for i in range(50)}
    assert {c.trace.run_id for c in more.cases} & old_ids <= kept
    assert len(more.cases) == 5


def test_case_becomes_a_valid_suite_scenario_with_its_reference() -> None:
    """The written scenario loads through the suite's own model, seeds its files, keeps the reference."""
    t = trace("run/7", 5, input={"task": "Refund order 7", "files": {"order.txt": "7, $40"},
                                 "amount": 40})
    golden = select([t], {"run/7": [fb("run/7", "negative", {"decision": "deny"})]},
                    config="cfg_a", now=NOW)
    scenario, seeds = to_scenario(golden.cases[0], {"required_tools": ["lookupOrder"]})
    loaded = Scenario.model_validate(scenario)
    assert loaded.task == "Refund order 7"
    assert loaded.invariants.required_tools == ("lookupOrder",)
    assert json.loads(loaded.expected or "") == {"decision": "deny"}
    assert "tier:negative_corrected" in loaded.tags
    assert seeds[loaded.seed_files["order.txt"]] == "7, $40"
    assert json.loads(seeds[loaded.seed_files["input.json"]]) == {"amount": 40}


def test_reference_scoring_is_field_by_field_for_structured_output() -> None:
    """Each reference leaf is matched on its own; text references are left to the judge."""
    expected = {"decision": "deny", "customer": {"id": "c1", "tier": "gold"}, "amount": 40}
    result = score('{"decision": "deny", "customer": {"id": "c1"}, "amount": 40.0, "x": 1}',
                   json.dumps(expected))
    assert result.mode == "fields"
    assert result.mismatches == ["/customer/tier"]
    assert result.score == pytest.approx(0.75)
    assert score("not json", expected).score == 0.0
    assert score("Refunded.", "Refunded the order.").mode == "judge"
    assert score("Refunded.", "Refunded the order.").score is None


def test_feedback_reported_on_the_trace_counts_and_bad_entries_are_flagged() -> None:
    """A trace's own `feedback` joins the stored feedback; an unreadable one sends the case to a human."""
    corrected = trace("inline", 5).model_copy(update={"feedback": {
        "tier": "negative", "correction": {"decision": "deny"}, "reviewer": "desk"}})
    broken = trace("broken", 5).model_copy(update={"feedback": {
        "tier": "positive", "correction": {"decision": "deny"}}})
    notes, unreadable = with_inline([corrected, broken], {})
    golden = select([corrected, broken], notes, config="cfg_a", now=NOW, unreadable=unreadable)
    assert [(c.trace.run_id, c.tier, c.reference) for c in golden.cases] == [
        ("inline", "negative_corrected", {"decision": "deny"})]
    assert golden.flagged[0].run_id == "broken"
    assert golden.flagged[0].reason.startswith("unreadable inline feedback")
