"""OpenInference spans, millisecond clocks and runs that say nothing, assembled (rolegate.spans)."""

from __future__ import annotations

import json

from bindings.models import Invariants
from gatekeeper.checks.invariants import check
from gatekeeper.window import WindowStats
from rolegate.spans import assemble
from rolegate.trace import Trace
from tests.test_spans import PLACED, span


def _oi_run() -> list:
    """An OpenInference run: AGENT root > AGENT dba > CHAIN turns > TOOL spans, and an LLM span."""
    return [
        span("1", None, "Agent workflow", 0, 100, **PLACED, **{"openinference.span.kind": "AGENT"}),
        span("2", "1", "dba", 1, 99, **{"openinference.span.kind": "AGENT", "agent.name": "dba"}),
        span("3", "2", "turn", 2, 40, **{"openinference.span.kind": "CHAIN"}),
        span("4", "3", "response", 3, 10, **{
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
            "llm.token_count.prompt": 120, "llm.token_count.completion": 8,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1"}),
        span("5", "3", "run_query", 11, 20, **{
            "openinference.span.kind": "TOOL", "tool.name": "run_query",
            "input.value": '{"q": "select 1"}', "output.value": "rows"}),
        span("6", "2", "turn", 41, 80, **{"openinference.span.kind": "CHAIN"}),
        span("7", "6", "drop_table", 50, 60, **{
            "openinference.span.kind": "TOOL", "tool.name": "drop_table",
            "input.value": '{"name": "users"}'}),
        span("8", "2", "response", 81, 90, **{
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
            "llm.token_count.prompt": 200, "llm.token_count.completion": 5,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "dropped it"}),
    ]


def test_openinference_spans_are_read_as_their_genai_counterparts() -> None:
    """TOOL spans are steps (tool.name, input.value), LLM spans give tokens, model, output."""
    trace = Trace.model_validate(assemble(_oi_run()))
    assert trace.tools == ("run_query", "drop_table")
    assert trace.steps is not None
    assert trace.steps[0].args == {"q": "select 1"} and trace.steps[0].result == "rows"
    assert trace.steps[0].agent == "dba" and trace.steps[0].tokens_in == 120
    assert (trace.tokens_in, trace.tokens_out) == (320, 13)
    assert trace.stamps.model_id == "gpt-4o" and trace.output_text == "dropped it"
    assert trace.judged is True
    verdict = check(trace, Invariants(forbidden_tools=("drop_table",)))
    assert verdict.forbidden == ("drop_table",) and verdict.blocking


def _js_run(*calls: tuple[str, int, int, str]) -> list:
    root = span("1", None, "invoke_agent a", 0, 100, **PLACED, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    return [root] + [span(sid, "1", f"execute_tool {tool}", start, end,
                          **{"gen_ai.tool.name": tool}) for tool, start, end, sid in calls]


def test_calls_tied_in_one_millisecond_are_sequential_and_in_arrival_order() -> None:
    """Whole-millisecond stamps: quick sequential calls tie; they keep the order they ended in
    (the order an SDK exports them), whatever their random span ids, and are never parallel."""
    for first_id, second_id in (("9", "2"), ("2", "9")):
        trace = Trace.model_validate(assemble(_js_run(("verify", 5, 5, first_id),
                                                      ("refund", 5, 5, second_id))))
        assert trace.tools == ("verify", "refund")
        assert trace.steps is not None and all(s.parallel_group is None for s in trace.steps)
    # A one-tick overlap is a rounding tie too; more than a tick is parallel.
    tied = Trace.model_validate(assemble(_js_run(("a", 5, 7, "2"), ("b", 6, 9, "3"))))
    assert tied.steps is not None and all(s.parallel_group is None for s in tied.steps)
    together = Trace.model_validate(assemble(_js_run(("a", 5, 9, "2"), ("b", 5, 9, "3"))))
    assert together.steps is not None and together.steps[0].parallel_group is not None


def test_the_issuing_turn_and_the_tree_order_calls_before_the_clock() -> None:
    """Calls whose stamps tie follow the model turn's tool-call list, and a call under an
    earlier turn comes first even when the clock says otherwise."""
    root = span("1", None, "invoke_agent a", 0, 100, **PLACED, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    chat = span("2", "1", "chat m", 1, 2, **{"gen_ai.output.messages": json.dumps([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "x"},
                                         {"type": "tool_call", "id": "y"}]}])})
    second = span("3", "1", "execute_tool later", 3, 3, **{
        "gen_ai.tool.name": "later", "gen_ai.tool.call.id": "y"})
    first = span("4", "1", "execute_tool sooner", 3, 3, **{
        "gen_ai.tool.name": "sooner", "gen_ai.tool.call.id": "x"})
    trace = Trace.model_validate(assemble([root, chat, second, first]))
    assert trace.tools == ("sooner", "later")


def test_a_run_of_spans_no_convention_reads_is_unjudged_not_a_pass() -> None:
    """Spans with no GenAI or OpenInference kind: the trace is judged false, its verdict is no
    pass, and a window counts it under `unjudged`, outside n."""
    spans = [span("1", None, "job", 0, 10, **PLACED), span("2", "1", "HTTP GET", 1, 5)]
    trace = Trace.model_validate(assemble(spans))
    assert trace.judged is False and trace.tools == ()
    verdict = check(trace, Invariants(forbidden_tools=("drop_table",)))
    assert not verdict.passed and not verdict.judged and verdict.to_json()["judged"] is False
    window = WindowStats()
    window.add(trace, verdict)
    assert (window.n, window.passes, window.unjudged) == (0, 0, 1)
    # A run with an output of its own says something: it is judged.
    spoken = [span("1", None, "job", 0, 10, **PLACED, **{"rolegate.output": "ok"})]
    assert Trace.model_validate(assemble(spoken)).judged is True


def test_a_call_under_an_earlier_turn_comes_first_whatever_its_depth() -> None:
    """Calls compare where their branches part: one under turn 1 (tied with turn 2 on the
    millisecond clock) comes before one made later directly under the agent."""
    root = span("1", None, "invoke_agent a", 0, 100, **PLACED, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})
    turn = span("2", "1", "turn", 10, 10)
    inner = span("3", "2", "execute_tool first", 10, 10, **{"gen_ai.tool.name": "first"})
    outer = span("4", "1", "execute_tool second", 10, 11, **{"gen_ai.tool.name": "second"})
    trace = Trace.model_validate(assemble([root, outer, turn, inner]))
    assert trace.tools == ("first", "second")
