"""rolegate.integrations.otel.SpanProcessor: GenAI spans reported in-process through the client."""

from __future__ import annotations

import pytest
from flask import Flask
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from rolegate.integrations.otel import SpanProcessor, placement_attributes
from router.api.traces import trace_store
from tests.agent_support import ROLE, candidate_key, live_client

pytestmark = pytest.mark.slow


def test_a_finished_run_of_spans_is_reported_as_its_trace(app: Flask) -> None:
    """Spans of one run become one trace: tools in order, a failed call, tokens, agent."""
    with live_client(app) as (_, client):
        provider = TracerProvider()
        processor = SpanProcessor(client)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("agent")
        resolution = client.resolve(ROLE, candidate_key())
        with tracer.start_as_current_span("invoke_agent support", attributes={
                **placement_attributes(resolution), "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "support", "rolegate.output": "done"}) as root:
            with tracer.start_as_current_span("chat m1", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "m1",
                    "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 4}):
                pass
            with tracer.start_as_current_span("execute_tool search", attributes={
                    "gen_ai.tool.name": "search", "gen_ai.tool.call.arguments": '{"q": 1}'}):
                pass
            with tracer.start_as_current_span("execute_tool lookup", attributes={
                    "gen_ai.tool.name": "lookup"}) as failing:
                failing.set_status(Status(StatusCode.ERROR, "not found"))
            run_id = format(root.get_span_context().trace_id, "032x")
        assert processor.force_flush()
        stored = trace_store(app).lookup(ROLE, run_id).trace
        assert (stored.arm, stored.config) == ("candidate", "cfg_b")
        assert stored.tools == ("search", "lookup") and stored.tool_errors == 1
        assert stored.steps is not None and stored.steps[0].args == {"q": 1}
        assert stored.steps[1].error == "not found" and stored.steps[1].agent == "support"
        assert (stored.tokens_in, stored.tokens_out, stored.output_text) == (30, 4, "done")


def test_an_unplaced_run_is_counted_not_raised(app: Flask) -> None:
    """A root span naming no role is refused and counted; the instrumented code never sees it."""
    with live_client(app) as (_, client):
        provider = TracerProvider()
        processor = SpanProcessor(client)
        provider.add_span_processor(processor)
        with provider.get_tracer("agent").start_as_current_span("invoke_agent x"):
            pass
        assert processor.refused == 1
