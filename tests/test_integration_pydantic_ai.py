"""rolegate.integrations.pydantic_ai with the real pydantic-ai, driven by its FunctionModel."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

from rolegate.integrations._common import NO_RESULT, UNOFFERED
from router.api.traces import trace_store
from tests.agent_support import ROLE, binding_stage, candidate_key, live_client, own_event_loop

# One worker runs every test that imports pydantic-ai (xdist_group): each
# worker that runs one pays its import, seconds of CPU.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pydantic_ai")]


@pytest.fixture(autouse=True)
def event_loop_per_test() -> Iterator[None]:
    """Each test runs the framework on its own default event loop."""
    with own_event_loop():
        yield


def test_the_trace_is_what_the_run_did(app: Flask) -> None:
    """Tools in order with args, results and errors, a parallel group, tokens, agent, output."""
    from tests.pydantic_ai_kit import build, rg
    with live_client(app) as (_, client):
        executed: list[str] = []
        agent = build(executed)
        resolution = client.resolve(ROLE, candidate_key())
        with client.recorder(resolution, stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            result = agent.run_sync("refund order 7")
            rg.record(run, result)
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "delete_account", "fail")
    assert stored.input == {"prompt": "refund order 7"}  # what the online judge reads
    assert stored.steps is not None
    search, lookup, delete, fail = stored.steps
    assert search.args == {"q": "refund"} and search.result == ["refund-policy"]
    assert lookup.result == {"id": 7, "total": 30}
    assert search.parallel_group == lookup.parallel_group != delete.parallel_group
    assert delete.error == rg.REFUSED and fail.error == "the ledger is locked"
    assert {s.agent for s in stored.steps} == {"support"} and search.model == "scripted"
    usage = result.usage
    assert (stored.tokens_in, stored.tokens_out) == (usage.input_tokens, usage.output_tokens)
    assert stored.output_text == "refund issued" and stored.tool_errors == 2
    assert stored.stamps.model_id == "function:scripted"
    assert "delete_account" not in executed
    assert agent.run_sync("outside any guard block").output == "refund issued"
    assert "delete_account" in executed  # no run to check against: the guard lets it be


def test_no_forbidden_call_executes_and_the_attempt_rolls_the_canary_back(app: Flask) -> None:
    """With the per-run guard, delete_account never runs; the attempt trips the wire."""
    from tests.pydantic_ai_kit import build, rg
    with live_client(app) as (url, client):
        executed: list[str] = []
        for n in range(5):
            resolution = client.resolve(ROLE, candidate_key(f"job{n}"))
            agent = build(executed)
            with client.recorder(resolution, stamps=rg.stamps(agent)) as run:
                rg.record(run, agent.run_sync("go", capabilities=[rg.Guard(client, run)]))
        assert client.flush(10)
        assert executed.count("search") == 5 and "delete_account" not in executed
        assert binding_stage(url) == "rolled_back"


def test_an_unoffered_call_is_a_failed_step_and_trips_the_wire(app: Flask) -> None:
    """The model calls a tool the agent lacks (no role rule names it): a failed step; it trips."""
    from tests.pydantic_ai_kit import (
        Agent,
        AgentInfo,
        FunctionModel,
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        rg,
    )

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "refund"}),
                                        ToolCallPart("wipe_cache", {"older_than": 7})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(script, model_name="scripted"), name="support",
                  capabilities=[rg.Guard()])
    executed: list[str] = []

    @agent.tool_plain
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [q]

    with live_client(app) as (url, client):
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps(agent)) as run, rg.guard(client, run):
            rg.record(run, agent.run_sync("go"))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("search", "wipe_cache") and stored.steps
    assert [s.error for s in stored.steps] == [None, UNOFFERED]
    assert [s.offered for s in stored.steps] == [None, False]  # the wire trips on this mark
    assert stored.steps[1].args == {"older_than": 7} and stored.output_text == "done"
    assert executed == ["search"]


def test_an_aborted_run_is_reported_with_its_calls_and_error(app: Flask) -> None:
    """A tool exception ends the run: the calls so far, the one without result, the run error."""
    from tests.pydantic_ai_kit import build, rg
    with live_client(app) as (_, client):
        agent = build([], crash=True)
        resolution = client.resolve(ROLE, candidate_key())
        with pytest.raises(RuntimeError, match="exploded"), \
                client.recorder(resolution, stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, agent.run_sync("go"))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "delete_account", "crash")
    assert stored.steps is not None and stored.steps[-1].error == NO_RESULT
    assert stored.error is not None and stored.error.type == "RuntimeError"


def test_stamps_follow_the_agent() -> None:
    """Changing the instructions or a tool's schema changes the stamp; the same agent keeps it."""
    from tests.pydantic_ai_kit import build, rg
    first, again = rg.stamps(build([])), rg.stamps(build([]))
    assert first == again
    other = build([])
    other._instructions = []  # a config without instructions
    assert rg.stamps(other)["instruction_hash"] != first["instruction_hash"]

    @other.tool_plain
    def extra(x: int) -> int:
        """One more tool."""
        return x

    assert rg.stamps(other)["tool_schema_hash"] != first["tool_schema_hash"]
