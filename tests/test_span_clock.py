"""Span order by what each SDK's clock can tell: the OTel JS SDK's stamps, and the Python SDK's."""

from __future__ import annotations

import random
import threading

from opentelemetry import context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rolegate.integrations.otel import placement_attributes, to_span
from rolegate.span_order import clock_of
from rolegate.spans import Span, assemble
from rolegate.trace import Trace
from tests.test_spans import PLACED, TRACE_ID

MS = 1_000_000


def _js(span_id: str, parent: str | None, name: str, real_start: int, real_end: int,
        **attributes: object) -> Span:
    """A span as the OTel JS SDK stamps it: start = Date.now() (whole ms, rounded down), end =
    that start plus the duration performance.now() measured (sub-millisecond)."""
    start = real_start // MS * MS
    return Span(TRACE_ID, span_id, parent, name, start, start + real_end - real_start,
                dict(attributes))


def _js_run(rng: random.Random, durations: tuple[float, float], calls: int = 2
            ) -> tuple[list[Span], list[str], list[int]]:
    """One agent turn after another, each a chat span then one tool call, back to back within
    a millisecond or so; spans arrive in the order they end (what a span processor exports).
    Returns the spans, the tools in call order and each call's chat tokens."""
    now = 1_700_000_000_000 * MS + rng.randrange(MS)
    root_id = f"{rng.getrandbits(64):016x}"
    spans: list[tuple[int, Span]] = []
    tools, tokens = [], []
    for index in range(calls):
        chat_start = now
        now += int(rng.uniform(0.05, 0.4) * MS)
        spans.append((now, _js(f"{rng.getrandbits(64):016x}", root_id, "chat m", chat_start, now,
                               **{"gen_ai.operation.name": "chat",
                                  "gen_ai.usage.input_tokens": 100 + index})))
        now += int(rng.uniform(0.005, 0.1) * MS)
        start = now
        now += int(rng.uniform(*durations) * MS)
        tool = f"tool_{index}"
        spans.append((now, _js(f"{rng.getrandbits(64):016x}", root_id, f"execute_tool {tool}",
                               start, now, **{"gen_ai.tool.name": tool})))
        tools.append(tool)
        tokens.append(100 + index)
        now += int(rng.uniform(0.005, 0.1) * MS)
    first = spans[0][1].start_ns
    spans.append((now, _js(root_id, None, "invoke_agent a", first, now + MS, **PLACED, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a",
        "rolegate.output": "done"})))
    return [span for _, span in sorted(spans, key=lambda pair: pair[0])], tools, tokens


def test_js_sdk_runs_are_detected_as_millisecond_starts_with_derived_ends() -> None:
    """Whole-millisecond starts with finer ends read as the JS SDK's clock: a 1 ms tick."""
    spans, _, _ = _js_run(random.Random(1), (0.05, 0.5))
    clock = clock_of(spans)
    assert clock.tick == MS and clock.ends_derived


def test_sequential_js_sdk_calls_are_in_order_and_never_parallel() -> None:
    """Sequential calls as the JS SDK stamps them (sub-ms and ~3 ms tools, 30 runs each): every
    run lists them in call order, none as parallel, each with its issuing turn's tokens."""
    rng = random.Random(37)
    for durations in ((0.02, 0.6), (2.5, 3.5)):
        for _ in range(30):
            spans, tools, tokens = _js_run(rng, durations, calls=rng.choice((2, 3)))
            trace = Trace.model_validate(assemble(spans))
            assert trace.tools == tuple(tools), durations
            assert trace.steps is not None
            assert all(step.parallel_group is None for step in trace.steps), durations
            assert [step.tokens_in for step in trace.steps] == tokens


def test_js_sdk_calls_issued_together_are_parallel() -> None:
    """Two calls started within the same moment and running 5 ms each overlap by more than the
    millisecond tick: one parallel group, whatever order they ended in."""
    rng = random.Random(5)
    base = 1_700_000_000_000 * MS + 400_000
    spans = [
        _js("00000000000000a1", "00000000000000f0", "execute_tool b", base + 20_000,
            base + 5 * MS, **{"gen_ai.tool.name": "b"}),
        _js("00000000000000a2", "00000000000000f0", "execute_tool a", base,
            base + 6 * MS, **{"gen_ai.tool.name": "a"}),
        _js("00000000000000f0", None, "invoke_agent a", base - MS, base + 8 * MS, **PLACED,
            **{"gen_ai.operation.name": "invoke_agent", "rolegate.output": "ok"}),
    ]
    rng.shuffle(spans)
    trace = Trace.model_validate(assemble(spans))
    assert sorted(trace.tools) == ["a", "b"] and trace.steps is not None
    groups = {step.parallel_group for step in trace.steps}
    assert len(groups) == 1 and None not in groups


def _python_sdk_run(parallel: bool) -> Trace:
    """Two tool calls under one agent span, made by the real OpenTelemetry Python SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    placed = placement_attributes({"role": PLACED["rolegate.role"],
                                   "config": PLACED["rolegate.config"],
                                   "arm": PLACED["rolegate.arm"]})
    both_open = threading.Barrier(2)

    def call(name: str) -> None:
        with tracer.start_as_current_span(f"execute_tool {name}",
                                          attributes={"gen_ai.tool.name": name}):
            if parallel:
                both_open.wait(5)  # each call is open while the other is

    with tracer.start_as_current_span("invoke_agent a", attributes={
            **placed, "gen_ai.operation.name": "invoke_agent", "rolegate.output": "ok"}):
        if parallel:
            current = context.get_current()
            threads = [threading.Thread(target=lambda n=n: (context.attach(current), call(n)))
                       for n in ("lookup", "search")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(5)
        else:
            call("lookup")
            call("search")
    provider.shutdown()
    return Trace.model_validate(assemble([to_span(s) for s in exporter.get_finished_spans()]))


def test_python_sdk_calls_are_ordered_by_its_nanosecond_clock() -> None:
    """The Python SDK's stamps: quick sequential calls stay sequential and in order; calls
    open at the same time on two threads are one parallel group."""
    sequential = _python_sdk_run(parallel=False)
    assert sequential.tools == ("lookup", "search") and sequential.steps is not None
    assert all(step.parallel_group is None for step in sequential.steps)
    together = _python_sdk_run(parallel=True)
    assert sorted(together.tools) == ["lookup", "search"] and together.steps is not None
    assert len({step.parallel_group for step in together.steps} - {None}) == 1
