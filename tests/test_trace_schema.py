"""The trace schema's optional fields: who made each call, parallel groups, tokens, run errors."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from pydantic import ValidationError

from gatekeeper.checks.trajectory import Change, classify
from rolegate.trace import Trace, canonical_tools
from tests.conftest import CALLER, OPERATOR, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def a_trace(**fields: Any) -> dict[str, Any]:
    """A minimal valid trace with `fields` on top."""
    return {"run_id": "r1", "role": "r", "config": "c", "arm": "current",
            "stamps": STAMPS, **fields}


def test_an_old_trace_still_validates_and_dumps_without_the_new_fields() -> None:
    """A trace written before the additions validates, and its compact dump gains no keys."""
    old = a_trace(steps=[{"tool": "search", "args": {"q": "x"}}], tokens=12)
    trace = Trace.model_validate(old)
    dumped = trace.model_dump(mode="json", exclude_none=True)
    assert "error" not in dumped and "tokens_in" not in dumped
    assert set(dumped["steps"][0]) == {"tool", "args"}


def test_the_new_fields_round_trip() -> None:
    """Agents, parallel groups, per-step tokens, latency and model, and the run error survive JSON."""
    trace = Trace.model_validate(a_trace(
        steps=[{"tool": "handoff", "agent": "triage"},
               {"tool": "lookup", "agent": "billing", "parent_agent": "triage",
                "parallel_group": "g1", "tokens_in": 40, "tokens_out": 7, "latency_s": 0.25,
                "model": "gpt-x", "error": "timeout"}],
        tokens_in=100, tokens_out=20, error={"type": "TimeoutError", "message": "slow"}))
    again = Trace.model_validate_json(trace.model_dump_json(exclude_none=True))
    assert again == trace
    assert trace.tokens == 120  # the sum when `tokens` is left out
    assert trace.error is not None and trace.error.type == "TimeoutError"
    assert trace.steps is not None and trace.steps[1].parent_agent == "triage"


@pytest.mark.parametrize("fields, field", [
    ({"tokens": 10, "tokens_in": 8, "tokens_out": 5}, "tokens"),
    ({"tokens_in": -1}, "tokens_in"),
    ({"error": {"message": "no type"}}, "error"),
    ({"steps": [{"tool": "x", "latency_s": -0.1}]}, "latency_s"),
    ({"steps": [{"tool": "x", "parallel_group": ""}]}, "parallel_group"),
    ({"steps": [{"tool": "x", "tokens_out": 1.5}]}, "tokens_out"),
])
def test_contradictory_or_malformed_additions_are_refused(fields: dict[str, Any],
                                                          field: str) -> None:
    """Token splits over the total, negative numbers, a typeless error, empty names are refused."""
    with pytest.raises(ValidationError, match=field):
        Trace.model_validate(a_trace(**fields))


def test_a_parallel_group_compares_as_a_set() -> None:
    """Two runs whose parallel calls completed in different orders are the SAME trajectory."""
    first = Trace.model_validate(a_trace(steps=[
        {"tool": "plan"}, {"tool": "fetch", "parallel_group": "p"},
        {"tool": "search", "parallel_group": "p"}, {"tool": "answer"}]))
    second = Trace.model_validate(a_trace(steps=[
        {"tool": "plan"}, {"tool": "search", "parallel_group": "p"},
        {"tool": "fetch", "parallel_group": "p"}, {"tool": "answer"}]))
    assert first.tools != second.tools  # what happened is kept as it happened
    assert classify(first.trajectory(), second.trajectory()) is Change.SAME
    ungrouped = Trace.model_validate(a_trace(steps=[
        {"tool": "plan"}, {"tool": "search"}, {"tool": "fetch"}, {"tool": "answer"}]))
    assert classify(first.trajectory(), ungrouped.trajectory()) is Change.REORDERED


def test_canonical_tools_keeps_ungrouped_calls_in_place() -> None:
    """Only a group's own positions are reordered; other calls never move."""
    assert canonical_tools(("c", "x", "a", "y", "b"), ("g", None, "g", None, "g")) == (
        "a", "x", "b", "y", "c")
    assert canonical_tools(("b", "a"), ()) == ("b", "a")


def test_the_shadow_gate_pairs_a_parallel_group_as_a_set(client: FlaskClient) -> None:
    """In shadow, a candidate whose parallel calls finished in another order is SAME, not
    REORDERED, in the gate view's trajectory histogram."""
    answer = client.put("/v1/bindings/r", json={"current": "c", "candidate": "d",
                                                 "stage": "shadow"}, headers=auth(OPERATOR))
    assert answer.status_code == 201, answer.json
    grouped = [{"tool": "plan"}, {"tool": "fetch", "parallel_group": "p"},
               {"tool": "search", "parallel_group": "p"}]
    swapped = [grouped[0], grouped[2], grouped[1]]
    ungrouped = [{"tool": "plan"}, {"tool": "search"}, {"tool": "fetch"}]
    traces = [a_trace(run_id="c1", key="k1", steps=grouped),
              a_trace(run_id="s1", key="k1", config="d", arm="shadow", steps=swapped),
              a_trace(run_id="c2", key="k2", steps=grouped),
              a_trace(run_id="s2", key="k2", config="d", arm="shadow", steps=ungrouped)]
    stored = client.post("/v1/traces", json={"traces": traces}, headers=auth(CALLER))
    assert stored.status_code == 200, stored.json
    gate = client.get("/v1/roles/r/gate", headers=auth(CALLER)).json
    histogram = gate["paired"]["trajectory"]
    assert (histogram["SAME"], histogram["REORDERED"]) == (1, 1)
