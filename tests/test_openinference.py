"""OpenInference's instrumentation of the Agents SDK, exported over OTLP to a real router.

The real `openinference-instrumentation-openai-agents` package turns the Agents
SDK's runs (driven by its ScriptedModel) into OpenInference spans
(`openinference.span.kind` TOOL/AGENT/CHAIN, `tool.name`); the OpenTelemetry
SDK's own OTLP/HTTP exporter sends them to the router as each ends. A trial
found such runs stored as `tools: []`, passed: 6 of 6 drop_table calls, no
rollback. Here the drop_table call trips the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from rolegate.integrations.otel import PlacementPropagator, placement_attributes
from router.cli.main import main
from tests.agent_support import own_event_loop
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

ROLE = "dba"
GATE = {"thresholds": {"min_samples": 5}, "invariants": {"forbidden_tools": ["drop_table"]}}

# One worker runs every test that imports openai-agents (xdist_group): each
# worker that runs one pays its import, seconds of CPU.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("openai_agents")]


@pytest.fixture
def router(app: Flask) -> Iterator[str]:
    """The router over real HTTP, with role dba on a 50% canary of cfg_b."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE})
        assert r.status_code == 201, r.text
        r = requests.post(f"{url}/v1/bindings/{ROLE}/canary", headers=auth(OPERATOR),
                          json={"share": 0.5, "reason": "canary"}, timeout=5)
        assert r.status_code == 200, r.text
        yield url


@pytest.fixture
def provider(router: str) -> Iterator[TracerProvider]:
    """A tracer provider exporting to the router, with OpenInference instrumenting the SDK."""
    # Imported here, not at collection: the SDK takes seconds of CPU in every xdist worker.
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
    provider = TracerProvider(resource=Resource.create({"service.name": "dba-agent"}))
    provider.add_span_processor(PlacementPropagator())
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{router}/v1/traces", headers=auth(CALLER), timeout=5)))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with own_event_loop():
            yield provider
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def run(provider: TracerProvider, arm: str, key: str, tools: list[str]) -> list[str]:
    """One Agents SDK run that calls `tools` one by one, inside a job span naming its placement."""
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
    executed: list[str] = []

    @function_tool
    def run_query(q: str) -> str:
        """Run a read-only query."""
        executed.append("run_query")
        return "3 rows"

    @function_tool
    def drop_table(name: str) -> str:
        """Drop a table."""
        executed.append("drop_table")
        return "dropped"

    steps: list[Any] = [ModelStep(output=[function_call(tool, {"q": "x"} if tool == "run_query"
                                                        else {"name": "users"},
                                                        call_id=f"c{i}")])
                        for i, tool in enumerate(tools)]
    agent = Agent(name="dba", instructions="Answer with data.", tools=[run_query, drop_table],
                  model=ScriptedModel([*steps, ModelStep(output=[assistant_message("done")])]))
    config = "cfg_b" if arm == "candidate" else "cfg_a"
    placement = placement_attributes({"role": ROLE, "config": config, "arm": arm, "key": key})
    with provider.get_tracer("dba-job").start_as_current_span("job", attributes=placement):
        Runner.run_sync(agent, "clean up")
    return executed


def _get(router: str, path: str) -> Any:
    return requests.get(f"{router}{path}", headers=auth(CALLER), timeout=5).json()


def test_an_openinference_trace_with_a_forbidden_tool_trips_the_wire(
        router: str, provider: TracerProvider) -> None:
    """The candidate run's OpenInference TOOL span for drop_table rolls the canary back."""
    assert run(provider, "current", "job-c", ["run_query"]) == ["run_query"]
    assert _get(router, f"/v1/bindings/{ROLE}")["binding"]["stage"] == "canary"
    run(provider, "candidate", "job-x", ["run_query", "drop_table"])
    binding = _get(router, f"/v1/bindings/{ROLE}")
    assert binding["binding"]["stage"] == "rolled_back"
    entry = _get(router, f"/v1/bindings/{ROLE}/history")["entries"][0]
    assert entry["actor"] == "tripwire" and "drop_table" in entry["reason"]
    tools = _get(router, f"/v1/roles/{ROLE}/tools")
    assert "run_query" in str(tools) and "drop_table" in str(tools)


def test_a_run_of_spans_that_say_nothing_is_unjudged_and_shown(
        router: str, provider: TracerProvider) -> None:
    """Spans of no convention the gate reads make an unjudged run: not in n, not a pass,
    counted in the gate view, in `rolegate status` and on the dashboard's role page."""
    tracer = provider.get_tracer("opaque-job")
    placement = placement_attributes({"role": ROLE, "config": "cfg_b", "arm": "candidate",
                                      "key": "job-u"})
    with (tracer.start_as_current_span("job", attributes=placement),
          tracer.start_as_current_span("HTTP POST /v1/chat")):
        pass
    arm = _get(router, f"/v1/roles/{ROLE}/gate")["arms"]["candidate"]
    assert (arm["n"], arm["passes"], arm["unjudged"]) == (0, 0, 1)
    env = {"ROLEGATE_URL": router, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
    status = CliRunner().invoke(main, ["status", ROLE], env=env, catch_exceptions=False)
    assert "unjudged 1" in status.output, status.output
    page = requests.get(f"{router}/ui/roles/{ROLE}", headers=auth(CALLER), timeout=5).text
    assert "unjudged runs" in page
