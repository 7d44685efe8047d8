"""Assembling GenAI spans into a trace (rolegate.spans): pure, no OpenTelemetry needed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from rolegate.spans import IncompleteRun, Span, assemble
from rolegate.trace import Trace

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PLACED = {"rolegate.role": "support", "rolegate.config": "cfg_b", "rolegate.arm": "candidate",
          "rolegate.key": "job-1"}


def span(span_id: str, parent: str | None, name: str, start: int, end: int,
         **attributes: Any) -> Span:
    """A finished span of TRACE_ID; times in ms from 0."""
    error = bool(attributes.pop("_error", False))
    return Span(TRACE_ID, span_id.rjust(16, "0"), parent.rjust(16, "0") if parent else None,
                name, start * 1_000_000, end * 1_000_000, attributes, error,
                "boom" if error else "", {"service.version": "7"})


def a_run() -> list[Span]:
    """triage calls search and lookup together, hands off to billing, which calls refund."""
    return [
        span("1", None, "invoke_agent triage", 0, 100, **PLACED, **{
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage",
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "refunded"}]}])}),
        span("2", "1", "chat m1", 1, 10, **{"gen_ai.request.model": "m1",
                                           "gen_ai.usage.input_tokens": 50,
                                           "gen_ai.usage.output_tokens": 7}),
        span("4", "1", "execute_tool lookup", 12, 14, **{"gen_ai.tool.name": "lookup"}),
        span("3", "1", "execute_tool search", 11, 20, **{
            "gen_ai.tool.name": "search", "gen_ai.tool.call.arguments": '{"q": "x"}',
            "gen_ai.tool.call.result": '["a"]'}),
        span("5", "1", "invoke_agent billing", 30, 90, **{
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"}),
        span("6", "5", "chat m2", 31, 40, **{"gen_ai.response.model": "m2",
                                            "gen_ai.usage.input_tokens": 80,
                                            "gen_ai.usage.output_tokens": 9}),
        span("7", "5", "execute_tool refund", 41, 50, _error=True,
             **{"gen_ai.tool.name": "refund", "error.type": "ValueError"}),
    ]


def test_a_run_becomes_the_trace_of_what_it_did() -> None:
    """Tools in start order, args and results, agents and handoff parent, tokens, output."""
    trace = Trace.model_validate(assemble(a_run()))
    assert (trace.run_id, trace.role, trace.config, trace.arm, trace.key) == (
        TRACE_ID, "support", "cfg_b", "candidate", "job-1")
    assert trace.tools == ("search", "lookup", "refund")
    assert trace.steps is not None
    search, lookup, refund = trace.steps
    assert search.args == {"q": "x"} and search.result == ["a"]
    assert search.parallel_group is not None and search.parallel_group == lookup.parallel_group
    assert (search.agent, search.model, search.tokens_in) == ("triage", "m1", 50)
    assert (refund.agent, refund.parent_agent, refund.model) == ("billing", "triage", "m2")
    assert refund.error == "boom" and refund.parallel_group is None
    assert (trace.tokens_in, trace.tokens_out, trace.tool_errors) == (130, 16, 1)
    assert trace.output_text == "refunded" and trace.answered
    assert trace.latency_s == pytest.approx(0.1)
    assert trace.stamps.model_id == "m1" and trace.stamps.agent_version == "7"


def test_a_retried_span_counts_once() -> None:
    """The same span id twice (a retried export) is one step."""
    spans = a_run()
    assert Trace.model_validate(assemble(spans + spans[2:4])).tools == (
        "search", "lookup", "refund")


def test_a_failed_root_is_the_run_error() -> None:
    """A root span with an ERROR status gives the run error, and no output means unanswered."""
    spans = [span("1", None, "invoke_agent a", 0, 5, _error=True,
                  **{**PLACED, "error.type": "TimeoutError"})]
    trace = Trace.model_validate(assemble(spans))
    assert trace.error is not None and (trace.error.type, trace.error.message) == (
        "TimeoutError", "boom")
    assert trace.answered is False and trace.steps == ()


def test_placement_comes_from_the_resource_or_earlier_spans() -> None:
    """Role, config and arm may sit on the resource, or be named by earlier spans."""
    root = span("1", None, "invoke_agent a", 0, 5)
    assert assemble([replace(root, resource=PLACED)])["role"] == "support"
    assert assemble([root], fallback=PLACED)["arm"] == "candidate"


def test_a_run_nobody_placed_or_without_root_is_incomplete() -> None:
    """No rolegate.role anywhere, or no root span, is refused with the reason."""
    with pytest.raises(IncompleteRun, match="rolegate.role"):
        assemble([span("1", None, "invoke_agent a", 0, 5)])
    with pytest.raises(IncompleteRun, match="no root span"):
        assemble([span("2", "1", "execute_tool x", 0, 5)])


def test_a_span_round_trips_through_its_json_form() -> None:
    """Pending spans survive being stored as JSON between export batches."""
    for each in a_run():
        assert Span.from_json(json.loads(json.dumps(each.to_json()))) == each
