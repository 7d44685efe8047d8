"""Criteria from an agent's spec: stable keys, deterministic checks, diffs, review by criterion."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gatekeeper.checks.criteria import Criterion, check, diff, evaluate, generate
from gatekeeper.checks.review import regressions, tally
from gatekeeper.checks.spec import Spec
from rolegate.trace import Trace

STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}


def support_spec(**changes: Any) -> Spec:
    """A refund-desk agent's spec; `changes` replace top-level fields."""
    data: dict[str, Any] = {
        "system": "You handle refund requests.",
        "instructions": [{"id": "tone", "text": "Be brief and polite."}],
        "output_schema": {
            "type": "object",
            "required": ["decision", "customer"],
            "properties": {
                "decision": {"type": "string", "enum": ["refund", "deny", "escalate"]},
                "customer": {"type": "object", "required": ["id"],
                             "properties": {"id": {"type": "string"}}},
                "note": {"type": "object", "required": ["text"],
                         "properties": {"text": {"type": "string"}}},
            },
        },
        "tools": [{"name": "lookupOrder", "required": True}, {"name": "verifyIdentity"},
                  {"name": "issueRefund"}],
        "escalation": [{
            "id": "high-value", "condition": "the refund is over 1000 dollars",
            "when": [{"field": "amount", "op": "gt", "value": 1000}],
            "tool": "verifyIdentity",
        }],
        "knowledge": [{"id": "refund-policy", "title": "Refund policy v3"}],
    }
    data.update(changes)
    return Spec.model_validate(data)


def trace(tools: list[str], output: str, input: dict[str, Any] | None = None) -> Trace:
    """A trace of the refund agent with these tools, output and input."""
    return Trace(run_id="r1", role="refunds", config="cfg", arm="current", tools=tuple(tools),
                 output_text=output, stamps=STAMPS, input=input)


GOOD = '{"decision": "refund", "customer": {"id": "c1"}}'


def keys(spec: Spec) -> list[str]:
    """The criterion keys generated from `spec`."""
    return [c.key for c in generate(spec)]


def test_generate_gives_one_key_per_requirement_identity() -> None:
    """Each schema path, the allowlist, each required tool, rule, instruction and document gets a key."""
    assert keys(support_spec()) == [
        "output:/customer", "output:/customer/id", "output:/decision", "output:/note/text",
        "actions:allowed", "tool:lookupOrder", "escalation:high-value", "instruction:tone",
        "knowledge:refund-policy",
    ]
    kinds = {c.key: c.kind for c in generate(support_spec())}
    assert kinds["escalation:high-value"] == "escalation"
    assert kinds["instruction:tone"] == "judge"


def test_keys_stable_when_instruction_and_rule_are_reworded() -> None:
    """Rewording an instruction or a rule's condition keeps every key and every check."""
    before = generate(support_spec())
    reworded = support_spec(
        instructions=[{"id": "tone", "text": "Keep answers short; stay courteous."}],
        escalation=[{"id": "high-value", "condition": "more than $1,000 is asked back",
                     "when": [{"field": "amount", "op": "gt", "value": 1000}],
                     "tool": "verifyIdentity"}],
    )
    after = generate(reworded)
    assert [c.key for c in after] == [c.key for c in before]
    changes = diff(before, after)
    assert changes.empty
    assert [c.key for c in changes.reworded] == ["escalation:high-value", "instruction:tone"]


def test_keys_change_when_the_requirement_changes() -> None:
    """A renamed field, a different required tool or a new rule id changes the key."""
    spec = support_spec(
        output_schema={"type": "object", "required": ["verdict"],
                       "properties": {"verdict": {"type": "string"}}},
        tools=[{"name": "lookupOrder"}, {"name": "verifyIdentity", "required": True}],
        escalation=[{"id": "large-refund", "condition": "the refund is over 1000 dollars",
                     "when": [{"field": "amount", "op": "gt", "value": 1000}],
                     "tool": "verifyIdentity"}],
    )
    changes = diff(generate(support_spec()), generate(spec))
    assert {c.key for c in changes.added} == {
        "output:/verdict", "tool:verifyIdentity", "escalation:large-refund"}
    assert {"output:/decision", "tool:lookupOrder", "escalation:high-value"} <= {
        c.key for c in changes.removed}
    assert [c.key for c in changes.changed] == ["actions:allowed"]


def test_diff_reports_a_rule_whose_check_changed_under_the_same_id() -> None:
    """A rule keeping its id but demanding more is listed as changed, not added."""
    stricter = support_spec(escalation=[{
        "id": "high-value", "condition": "the refund is over 500 dollars",
        "when": [{"field": "amount", "op": "gt", "value": 500}], "tool": "verifyIdentity"}])
    changes = diff(generate(support_spec()), generate(stricter))
    assert [c.key for c in changes.changed] == ["escalation:high-value"]
    assert changes.changed[0].after.params["when"][0]["value"] == 500
    assert not changes.added and not changes.removed


def test_generated_criteria_catch_seeded_violations() -> None:
    """A missing field, a wrong type, a disallowed tool and a skipped escalation each fail."""
    criteria = generate(support_spec())
    ok = evaluate(criteria, trace(["lookupOrder", "verifyIdentity", "issueRefund"], GOOD,
                                  {"amount": 5000}))
    assert all(v is not False for v in ok.values()), ok
    bad = evaluate(criteria, trace(["lookupOrder", "deleteAccount", "issueRefund"],
                                   '{"decision": "maybe", "customer": {"id": 7}}',
                                   {"amount": 5000}))
    assert {k for k, v in bad.items() if v is False} == {
        "output:/decision", "output:/customer/id", "actions:allowed", "escalation:high-value"}


def test_escalation_applies_only_when_its_condition_holds() -> None:
    """Below the threshold, or with no input, the rule gives no verdict rather than a pass."""
    rule = {c.key: c for c in generate(support_spec())}["escalation:high-value"]
    assert check(rule, trace(["lookupOrder"], GOOD, {"amount": 20})) is None
    assert check(rule, trace(["lookupOrder"], GOOD, None)) is None
    assert check(rule, trace(["lookupOrder"], GOOD, {"amount": 2000})) is False


def test_escalation_answer_checked_on_the_named_output_field() -> None:
    """A rule demanding an answer reads the output field it names."""
    spec = support_spec(escalation=[{
        "id": "legal", "condition": "the customer threatens legal action",
        "when": [{"field": "flags", "op": "contains", "value": "legal"}],
        "answer": "escalate", "answer_field": "decision"}])
    rule = {c.key: c for c in generate(spec)}["escalation:legal"]
    legal = {"flags": ["legal"]}
    assert check(rule, trace([], '{"decision": "escalate"}', legal)) is True
    assert check(rule, trace([], GOOD, legal)) is False


def test_nested_requirement_under_absent_optional_parent_does_not_apply() -> None:
    """note.text is required only when the optional note is there."""
    field = {c.key: c for c in generate(support_spec())}["output:/note/text"]
    assert check(field, trace([], GOOD)) is None
    assert check(field, trace([], '{"note": {}}')) is False
    assert check(field, trace([], "not json")) is None
    top = {c.key: c for c in generate(support_spec())}["output:/decision"]
    assert check(top, trace([], "not json")) is False


def test_judge_criteria_are_left_to_the_judge() -> None:
    """Instructions and knowledge references never get a deterministic verdict."""
    verdicts = evaluate(generate(support_spec()), trace([], GOOD))
    assert verdicts["instruction:tone"] is None and verdicts["knowledge:refund-policy"] is None


def test_spec_refuses_a_rule_demanding_a_tool_outside_the_allowlist() -> None:
    """An escalation rule naming a tool the agent may not call is refused with its id."""
    with pytest.raises(ValidationError, match="high-value"):
        support_spec(tools=[{"name": "lookupOrder"}])


def test_regression_is_named_by_its_criterion_key() -> None:
    """A candidate losing verifyIdentity on escalated cases is listed under that rule's key."""
    criteria = generate(support_spec())
    cases = {f"case-{i}": {"amount": 5000 if i < 12 else 10} for i in range(30)}
    base = {cid: evaluate(criteria, trace(["lookupOrder", "verifyIdentity"], GOOD, inp))
            for cid, inp in cases.items()}
    cand = {cid: evaluate(criteria, trace(["lookupOrder"], GOOD, inp))
            for cid, inp in cases.items()}
    found = regressions(base, cand, criteria)
    assert [r.key for r in found] == ["escalation:high-value"]
    assert found[0].lost == 12
    assert found[0].message == "12 cases lost the verifyIdentity call"
    rates = tally(cand.values())
    assert rates["escalation:high-value"].rate == 0.0
    assert rates["escalation:high-value"].skipped == 18
    assert rates["tool:lookupOrder"].rate == 1.0


def test_criterion_model_round_trips_through_json() -> None:
    """Stored criteria load back equal, so diffs across stored configs are exact."""
    for criterion in generate(support_spec()):
        assert Criterion.model_validate_json(criterion.model_dump_json()) == criterion
