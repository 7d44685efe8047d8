"""rolegate.integrations.openai_agents with the real Agents SDK, driven by its ScriptedModel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.exceptions import AgentsException, ModelBehaviorError
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from flask import Flask

from rolegate.integrations import openai_agents as rg
from rolegate.integrations._common import NO_RESULT
from router.api.traces import trace_store
from tests.agent_support import ROLE, binding_stage, candidate_key, live_client, own_event_loop

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def event_loop_per_test() -> Iterator[None]:
    """Each test runs the framework on its own default event loop."""
    with own_event_loop():
        yield
NO_TRACING = RunConfig(tracing_disabled=True)


def usage(tokens_in: int, tokens_out: int) -> Usage:
    """One model turn's usage."""
    return Usage(requests=1, input_tokens=tokens_in, output_tokens=tokens_out,
                 total_tokens=tokens_in + tokens_out)


def build(executed: list[str], *, crash: bool = False) -> Agent[Any]:
    """triage calls search+lookup together and hands off to billing, which calls
    delete_account and a failing tool (or one whose exception ends the run), then answers."""

    @function_tool
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [f"{q}-policy"]

    @function_tool
    def lookup(id: int) -> dict[str, Any]:
        """Look an order up."""
        executed.append("lookup")
        return {"id": id}

    @function_tool
    def delete_account(id: int) -> str:
        """Delete the customer's account."""
        executed.append("delete_account")
        return "deleted"

    @function_tool
    def refund(id: int) -> str:
        """Refund an order (the ledger is down)."""
        executed.append("refund")
        raise ConnectionError("ledger unreachable")

    @function_tool(failure_error_function=None)
    def audit() -> str:
        """An audit whose exception ends the run."""
        executed.append("audit")
        raise RuntimeError("audit log full")

    last = function_call("audit", {}, call_id="c5") if crash else assistant_message("refunded")
    billing = Agent(name="billing", instructions="Handle billing.", tools=[
        delete_account, refund, audit], model=ScriptedModel([
            ModelStep(output=[function_call("delete_account", {"id": 7}, call_id="c3"),
                              function_call("refund", {"id": 7}, call_id="c4")],
                      usage=usage(30, 5)),
            ModelStep(output=[last], usage=usage(40, 3))]))
    return Agent(name="triage", instructions="Triage the ticket.", tools=[search, lookup],
                 handoffs=[billing], model=ScriptedModel([
                     ModelStep(output=[function_call("search", {"q": "refund"}, call_id="c1"),
                                       function_call("lookup", {"id": 7}, call_id="c2")],
                               usage=usage(10, 2)),
                     ModelStep(output=[function_call("transfer_to_billing", {}, call_id="h1")],
                               usage=usage(20, 2))]))


def test_the_trace_is_what_the_run_did(app: Flask) -> None:
    """Calls in order across the handoff, the hidden tool failure marked, tokens and output."""
    with live_client(app) as (_, client):
        executed: list[str] = []
        agent = rg.protect(build(executed))
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps(agent)) as run, rg.guard(client, run):
            result = Runner.run_sync(agent, "refund order 7", run_config=NO_TRACING)
            rg.record(run, result)
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "transfer_to_billing", "delete_account", "refund")
    assert stored.input == {"prompt": "refund order 7"}  # what the online judge reads
    assert stored.steps is not None
    search, lookup, handoff, delete, refund = stored.steps
    assert search.parallel_group == lookup.parallel_group is not None
    assert (search.agent, handoff.agent, delete.agent, delete.parent_agent) == (
        "triage", "triage", "billing", "triage")
    assert search.result == ["refund-policy"] and lookup.args == {"id": 7}
    assert delete.error == rg.REFUSED
    assert refund.error == "ConnectionError: ledger unreachable"  # not the SDK's generic text
    assert (stored.tokens_in, stored.tokens_out) == (100, 12)
    assert stored.output_text == "refunded" and stored.tool_errors == 2
    assert "delete_account" not in executed and "refund" in executed


def test_no_forbidden_call_executes_and_the_attempt_rolls_the_canary_back(app: Flask) -> None:
    """The tool guardrail rejects delete_account before it runs; the canary rolls back."""
    with live_client(app) as (url, client):
        executed: list[str] = []
        for n in range(3):
            agent = rg.protect(build(executed))
            with client.recorder(client.resolve(ROLE, candidate_key(f"job{n}")),
                                 stamps=rg.stamps(agent)) as run, rg.guard(client, run):
                rg.record(run, Runner.run_sync(agent, "go", run_config=NO_TRACING))
        assert client.flush(10)
        assert executed.count("search") == 3 and "delete_account" not in executed
        assert binding_stage(url) == "rolled_back"


def unoffered_agent(executed: list[str]) -> Agent[Any]:
    """An agent offering only search, whose model also calls wipe_cache (not offered)."""

    @function_tool
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [q]

    return rg.protect(Agent(name="support", tools=[search], model=ScriptedModel([
        ModelStep(output=[function_call("search", {"q": "refund"}, call_id="c1"),
                          function_call("wipe_cache", {"older_than": 7}, call_id="c2")]),
        ModelStep(output=[assistant_message("done")])])))


def test_an_unoffered_call_is_a_failed_step_and_trips_the_wire(app: Flask) -> None:
    """Under rg.run_config() the run goes on; the unoffered call is a failed step; it trips."""
    with live_client(app) as (url, client):
        executed: list[str] = []
        agent = unoffered_agent(executed)
        with client.recorder(client.resolve(ROLE, candidate_key()),
                             stamps=rg.stamps(agent)) as run, rg.guard(client, run):
            rg.record(run, Runner.run_sync(agent, "go", run_config=rg.run_config(NO_TRACING)))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("search", "wipe_cache") and stored.steps
    assert [s.error for s in stored.steps] == [None, rg.UNOFFERED]
    assert [s.offered for s in stored.steps] == [None, False]  # the wire trips on this mark
    assert stored.steps[1].args == {"older_than": 7} and stored.output_text == "done"
    assert executed == ["search"] and stored.error is None


def test_under_the_sdk_default_the_unoffered_call_still_trips(app: Flask) -> None:
    """The SDK's default raises ModelBehaviorError before any hook: the guard records the call."""
    with live_client(app) as (url, client):
        executed: list[str] = []
        agent = unoffered_agent(executed)
        with pytest.raises(ModelBehaviorError), client.recorder(
                client.resolve(ROLE, candidate_key()), stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, Runner.run_sync(agent, "go", run_config=NO_TRACING))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("wipe_cache",) and stored.steps
    assert stored.steps[0].error == rg.UNOFFERED and stored.steps[0].agent == "support"
    assert stored.steps[0].offered is False
    assert stored.error is not None and stored.error.type == "ModelBehaviorError"
    assert executed == []


def test_an_unprotected_failure_is_still_marked_failed() -> None:
    """Without protect(), a call answered with the SDK's generic error text counts as failed."""

    class Run:
        """The recorder calls record() makes, kept for inspection."""

        def __init__(self) -> None:
            self.steps: list[dict[str, Any]] = []

        def tool(self, name: str, args: Any, **step: Any) -> None:
            self.steps.append({"tool": name, **step})

        def cost(self, **tokens: int) -> None:
            pass

        def output(self, text: str) -> None:
            pass

    run = Run()
    rg.record(run, Runner.run_sync(build([]), "go", run_config=NO_TRACING))
    refund = next(step for step in run.steps if step["tool"] == "refund")
    assert refund["error"] and "error occurred" in refund["error"]


def test_an_aborted_run_is_reported_with_its_calls_and_error(app: Flask) -> None:
    """A tool exception ends the run: calls so far, the one in flight without result, the error."""
    with live_client(app) as (_, client):
        agent = rg.protect(build([], crash=True))
        with pytest.raises(AgentsException), client.recorder(
                client.resolve(ROLE, candidate_key()), stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, Runner.run_sync(agent, "go", run_config=NO_TRACING))
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools[-1] == "audit" and stored.steps is not None
    assert stored.steps[-1].error == NO_RESULT
    assert stored.error is not None and "audit log full" in stored.error.message


def test_stamps_cover_every_agent_of_the_graph() -> None:
    """A change to the handoff target's instructions changes the instruction hash."""
    first = rg.stamps(build([]))
    assert first == rg.stamps(build([]))
    changed = build([])
    target = changed.handoffs[0]
    assert isinstance(target, Agent)
    target.instructions = "Handle billing, and be quick."
    assert rg.stamps(changed)["instruction_hash"] != first["instruction_hash"]
    assert rg.stamps(changed)["tool_schema_hash"] == first["tool_schema_hash"]
