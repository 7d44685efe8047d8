"""The OpenTelemetry SDK's own OTLP/HTTP exporter, pointed at a real router on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from flask import Flask
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from rolegate.integrations.otel import PlacementPropagator, placement_attributes
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

GATE = {"thresholds": {"min_samples": 5}, "invariants": {"forbidden_tools": ["delete_account"]}}

pytestmark = pytest.mark.slow


@pytest.fixture
def router(app: Flask) -> Iterator[str]:
    """The router over real HTTP, with role support on a 50% canary of cfg_b."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/support", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE})
        assert r.status_code == 201, r.text
        r = requests.post(f"{url}/v1/bindings/support/canary", headers=auth(OPERATOR),
                          json={"share": 0.5, "reason": "canary"}, timeout=5)
        assert r.status_code == 200, r.text
        yield url


def tracer_provider(url: str) -> TracerProvider:
    """An SDK provider exporting each span as it ends (one export per span) to the router."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    provider.add_span_processor(PlacementPropagator())
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=auth(CALLER), timeout=5)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def run_agent(provider: TracerProvider, arm: str, key: str, tools: list[str],
              before_root_ends: object = None) -> None:
    """One agent run under GenAI conventions: invoke_agent > chat, execute_tool spans."""
    tracer = provider.get_tracer("test-agent")
    config = "cfg_b" if arm == "candidate" else "cfg_a"
    attributes = {**placement_attributes({"role": "support", "config": config, "arm": arm,
                                          "key": key}),
                  "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
    with tracer.start_as_current_span("invoke_agent support", attributes=attributes):
        with tracer.start_as_current_span("chat m1", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "m1",
                "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5}):
            pass
        for name in tools:
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}):
                pass
        if callable(before_root_ends):
            before_root_ends()


def test_exported_runs_are_counted_by_the_gate(router: str) -> None:
    """Runs exported span by span arrive as traces the gate counts, per arm, with their tools."""
    provider = tracer_provider(router)
    for n in range(3):
        run_agent(provider, "candidate", f"job-{n}", ["search", "lookup"])
    run_agent(provider, "current", "job-c", ["search"])
    provider.shutdown()
    gate = requests.get(f"{router}/v1/roles/support/gate", headers=auth(CALLER), timeout=5).json()
    assert gate["arms"]["candidate"]["n"] == 3 and gate["arms"]["current"]["n"] == 1
    tools = requests.get(f"{router}/v1/roles/support/tools", headers=auth(CALLER),
                         timeout=5).json()
    assert "search" in str(tools) and "lookup" in str(tools)


def test_a_forbidden_tool_span_rolls_the_canary_back_before_the_run_ends(router: str) -> None:
    """The execute_tool span of a forbidden tool trips the wire as soon as it is exported."""
    provider = tracer_provider(router)
    stages: list[str] = []

    def look() -> None:
        stages.append(requests.get(f"{router}/v1/bindings/support", headers=auth(CALLER),
                                   timeout=5).json()["binding"]["stage"])

    run_agent(provider, "candidate", "job-x", ["search", "delete_account"], before_root_ends=look)
    provider.shutdown()
    assert stages == ["rolled_back"]
    history = requests.get(f"{router}/v1/bindings/support/history", headers=auth(CALLER),
                           timeout=5).json()["entries"]
    assert history[0]["actor"] == "tripwire" and "delete_account" in history[0]["reason"]
