"""rolegate.integrations.langgraph with real LangGraph, driven by LangChain's GenericFakeChatModel."""

from __future__ import annotations

import asyncio

import pytest
from flask import Flask

from rolegate.integrations._common import NO_RESULT, UNOFFERED
from router.api.traces import trace_store
from tests.agent_support import ROLE, binding_stage, candidate_key, live_client

# One worker runs every test that imports langgraph (xdist_group): each
# worker that runs one pays its import, seconds of CPU.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("langgraph")]


def test_the_trace_is_what_the_run_did(app: Flask) -> None:
    """Calls in order across the handoff, agents and parents, the refusal, the failure, tokens."""
    from tests.langgraph_kit import PROMPT, build, rg
    with live_client(app) as (_, client):
        executed: list[str] = []
        graph = build(executed)
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps("scripted", [])) as run, rg.guard(client, run):
            rg.record(run, graph.invoke(PROMPT))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "transfer_to_billing", "delete_account", "refund")
    assert stored.steps is not None
    assert stored.input == {"prompt": "refund order 7"}  # what the online judge reads
    search, lookup, handoff, delete, refund = stored.steps
    assert search.parallel_group == lookup.parallel_group is not None
    assert delete.parallel_group == refund.parallel_group != search.parallel_group
    assert (search.agent, handoff.agent, delete.agent, delete.parent_agent) == (
        "triage", "triage", "billing", "triage")
    assert search.parent_agent is None
    assert search.result == '["refund-policy"]' and lookup.args == {"id": 7}
    assert delete.error == rg.REFUSED
    assert refund.error is not None and "ledger unreachable" in refund.error
    assert (stored.tokens_in, stored.tokens_out) == (100, 12)
    assert stored.output_text == "refunded" and stored.tool_errors == 2
    assert "delete_account" not in executed and "refund" in executed


def test_no_forbidden_call_executes_and_the_attempt_rolls_the_canary_back(app: Flask) -> None:
    """wrap_tool_call refuses delete_account before it runs; the candidate's attempt trips."""
    from tests.langgraph_kit import PROMPT, build, rg
    with live_client(app) as (url, client):
        executed: list[str] = []
        for n in range(3):
            with client.recorder(client.resolve(ROLE, candidate_key(f"job{n}")),
                                 stamps=rg.stamps("scripted", [])) as run, \
                    rg.guard(client, run):
                rg.record(run, build(executed).invoke(PROMPT))
        assert client.flush(10)
        assert executed.count("search") == 3 and "delete_account" not in executed
        assert binding_stage(url) == "rolled_back"


def test_an_async_graph_is_guarded_too(app: Flask) -> None:
    """ainvoke goes through awrap_tool_call: the same refusal, the same trace."""
    from tests.langgraph_kit import PROMPT, build, rg
    with live_client(app) as (_, client):
        executed: list[str] = []
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps("scripted", [])) as run, rg.guard(client, run):
            rg.record(run, asyncio.run(build(executed).ainvoke(PROMPT)))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert "delete_account" not in executed and stored.steps is not None
    assert stored.steps[3].tool == "delete_account" and stored.steps[3].error == rg.REFUSED


def test_an_unoffered_call_is_a_failed_step_and_trips_the_wire(app: Flask) -> None:
    """The model calls a tool the node lacks (no role rule names it): a failed step; it trips."""
    from tests.langgraph_kit import (
        END,
        PROMPT,
        START,
        MessagesState,
        ScriptedChatModel,
        StateGraph,
        ai,
        rg,
        tool,
    )
    executed: list[str] = []

    @tool
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [q]

    model = ScriptedChatModel(messages=iter([
        ai(("search", {"q": "refund"}, "c1"), ("wipe_cache", {"older_than": 7}, "c2")),
        ai(text="done")]))
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", rg.tool_node([search]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", lambda state: "tools" if state["messages"][-1].tool_calls
                                else END, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    compiled = graph.compile()
    with live_client(app) as (url, client):
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps(model, [search])) as run, rg.guard(client, run):
            rg.record(run, compiled.invoke(PROMPT))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("search", "wipe_cache") and stored.steps
    assert [s.error for s in stored.steps] == [None, UNOFFERED]
    assert [s.offered for s in stored.steps] == [None, False]  # the wire trips on this mark
    assert stored.steps[1].args == {"older_than": 7} and stored.output_text == "done"
    assert executed == ["search"] and stored.error is None


def test_an_aborted_run_is_reported_with_its_calls_and_error(app: Flask) -> None:
    """A tool exception ends the graph: the calls the hook saw, the one in flight, the error."""
    from tests.langgraph_kit import PROMPT, build, rg
    with live_client(app) as (_, client):
        with pytest.raises(RuntimeError, match="audit log full"), client.recorder(
                client.resolve(ROLE, candidate_key()), stamps=rg.stamps("scripted", [])) as run, \
                rg.guard(client, run):
            rg.record(run, build([], crash=True).invoke(PROMPT))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    # No state comes back from a graph that raised: the steps are the calls the hook saw
    # (billing's two calls ran side by side, so in either order).
    assert stored.tools[:3] == ("search", "lookup", "transfer_to_billing")
    assert set(stored.tools[3:]) == {"delete_account", "audit"} and stored.steps is not None
    by_tool = {step.tool: step for step in stored.steps}
    assert by_tool["search"].result == '["refund-policy"]'
    assert by_tool["audit"].error == NO_RESULT and by_tool["delete_account"].error == rg.REFUSED
    assert stored.error is not None and "audit log full" in stored.error.message


BODY = {"model": {"name": "gpt-test"}, "instructions": "Summarize.",
        "tools": [{"name": "read_file", "description": "Read a workspace file.",
                   "parameters": {"type": "object", "required": ["path"],
                                  "properties": {"path": {"type": "string"}}}}]}


def test_tools_come_from_the_body_with_its_schemas() -> None:
    """The body's tool list decides what is offered, with the body's JSON schema and text."""
    from tests.langgraph_kit import rg
    calls: list[str] = []

    def read_file(path: str) -> str:
        calls.append(path)
        return "revenue: 12"

    def send_email(to: str) -> str:
        raise AssertionError("not in the body: never offered")

    made = rg.tools(BODY, {"read_file": read_file, "send_email": send_email})
    assert [t.name for t in made] == ["read_file"]
    assert made[0].description == "Read a workspace file."
    assert made[0].tool_call_schema["required"] == ["path"]  # type: ignore[index]
    assert made[0].invoke({"path": "notes.md"}) == "revenue: 12" and calls == ["notes.md"]
    with pytest.raises(ValueError, match="read_file"):
        rg.tools(BODY, {})
    with pytest.raises(ValueError, match="no body"):
        rg.tools(None, {"read_file": read_file})


def test_stamps_follow_the_model_instructions_and_tool_schemas() -> None:
    """Another model, instruction or schema changes its stamp; the same inputs give the same."""
    from tests.langgraph_kit import ScriptedChatModel, rg
    made = rg.tools(BODY, {"read_file": lambda path: path})
    first = rg.stamps(ScriptedChatModel(messages=iter([])), made, instructions="Summarize.")
    assert first["model_id"] == "ScriptedChatModel"
    assert rg.stamps("gpt-test", made, instructions="Summarize.")["model_id"] == "gpt-test"
    wider = {**BODY, "tools": [{**BODY["tools"][0], "description": "Read any file."}]}
    other = rg.tools(wider, {"read_file": lambda path: path})
    assert rg.stamps("m", other)["tool_schema_hash"] != rg.stamps("m", made)["tool_schema_hash"]
    assert rg.stamps("m", made, instructions="A")["instruction_hash"] != rg.stamps(
        "m", made, instructions="B")["instruction_hash"]
