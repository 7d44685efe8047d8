"""rolegate.integrations.google_adk with the real ADK, driven by a scripted BaseLlm."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from flask import Flask
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from rolegate import Client
from rolegate.integrations import google_adk as rg
from rolegate.integrations._common import NO_RESULT, UNOFFERED
from router.api.traces import trace_store
from tests.agent_support import ROLE, binding_stage, candidate_key, live_client

pytestmark = pytest.mark.slow


class ScriptedLlm(BaseLlm):
    """A model that answers each request with the next scripted list of parts."""

    script: list[list[types.Part]]
    turn: int = 0

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        """The next scripted turn, with 10 prompt tokens per turn so far and 3 completion."""
        parts = self.script[self.turn]
        self.turn += 1
        yield LlmResponse(content=types.Content(role="model", parts=parts),
                          usage_metadata=types.GenerateContentResponseUsageMetadata(
                              prompt_token_count=10 * self.turn, candidates_token_count=3,
                              total_token_count=10 * self.turn + 3))


def call(name: str, args: dict[str, Any], call_id: str) -> types.Part:
    """A function-call part."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args, id=call_id))


def build(executed: list[str], *, crash: bool = False) -> LlmAgent:
    """triage calls search+lookup together and transfers to billing, which calls
    delete_account (and, with `crash`, a tool whose exception ends the run), then answers."""

    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [f"{q}-policy"]

    def lookup(id: int) -> dict[str, Any]:
        """Look an order up."""
        executed.append("lookup")
        return {"id": id}

    def delete_account(id: int) -> str:
        """Delete the customer's account."""
        executed.append("delete_account")
        return "deleted"

    def audit() -> str:
        """An audit whose exception ends the run."""
        executed.append("audit")
        raise RuntimeError("audit log full")

    billing_calls = [call("delete_account", {"id": 7}, "c3")]
    if crash:
        billing_calls.append(call("audit", {}, "c4"))
    billing = LlmAgent(name="billing", instruction="Handle billing.",
                       tools=[delete_account, audit], model=ScriptedLlm(
                           model="scripted-billing",
                           script=[billing_calls, [types.Part(text="refunded")]]))
    return LlmAgent(name="triage", instruction="Triage the ticket.", tools=[search, lookup],
                    sub_agents=[billing], model=ScriptedLlm(model="scripted-triage", script=[
                        [call("search", {"q": "refund"}, "c1"), call("lookup", {"id": 7}, "c2")],
                        [call("transfer_to_agent", {"agent_name": "billing"}, "h1")]]))


def run_once(client: Client, agent: LlmAgent, key: str) -> Any:
    """One invocation through InMemoryRunner, recorded and guarded; returns the recorder."""

    async def go() -> Any:
        runner = InMemoryRunner(agent=agent, app_name="support")
        session = await runner.session_service.create_session(app_name="support", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="refund order 7")])
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, [e async for e in runner.run_async(
                user_id="u", session_id=session.id, new_message=message)])
        return run

    return asyncio.run(go())


def test_the_trace_is_what_the_run_did(app: Flask) -> None:
    """Calls in order with the transfer, a parallel group, agents, the refusal, tokens, output."""
    with live_client(app) as (_, client):
        executed: list[str] = []
        run = run_once(client, rg.protect(build(executed)), candidate_key())
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "transfer_to_agent", "delete_account")
    assert stored.input == {"prompt": "refund order 7"}  # what the online judge reads
    assert stored.steps is not None
    search, lookup, transfer, delete = stored.steps
    assert search.parallel_group == lookup.parallel_group is not None
    assert search.result == ["refund-policy"] and lookup.result == {"id": 7}
    assert (transfer.agent, delete.agent, delete.parent_agent) == ("triage", "billing", "triage")
    assert delete.error == rg.REFUSED and stored.tool_errors == 1
    assert (stored.tokens_in, stored.tokens_out) == (10 + 20 + 10 + 20, 12)
    assert stored.output_text == "refunded"
    assert stored.stamps.model_id == "scripted-triage"
    assert "delete_account" not in executed


def test_no_forbidden_call_executes_and_the_attempt_rolls_the_canary_back(app: Flask) -> None:
    """before_tool_callback refuses delete_account before it runs; the canary rolls back."""
    with live_client(app) as (url, client):
        executed: list[str] = []
        for n in range(3):
            run_once(client, rg.protect(build(executed)), candidate_key(f"job{n}"))
        assert client.flush(10)
        assert executed.count("search") == 3 and "delete_account" not in executed
        assert binding_stage(url) == "rolled_back"


def test_an_unoffered_call_is_a_failed_step_and_trips_the_wire(app: Flask) -> None:
    """The model calls a tool the agent lacks (no role rule names it): a failed step; it trips."""
    executed: list[str] = []

    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [q]

    agent = rg.protect(LlmAgent(name="support", tools=[search], model=ScriptedLlm(
        model="scripted", script=[[call("search", {"q": "refund"}, "c1"),
                                   call("wipe_cache", {"older_than": 7}, "c2")],
                                  [types.Part(text="done")]])))
    with live_client(app) as (url, client):
        run = run_once(client, agent, candidate_key())
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("search", "wipe_cache") and stored.steps
    assert [s.error for s in stored.steps] == [None, UNOFFERED]
    assert [s.offered for s in stored.steps] == [None, False]  # the wire trips on this mark
    assert stored.steps[1].args == {"older_than": 7} and stored.output_text == "done"
    assert executed == ["search"] and stored.error is None


def test_an_aborted_run_is_reported_with_its_calls_and_error(app: Flask) -> None:
    """A raising tool ends the ADK run: the calls the callbacks saw, the error, still reported."""
    with live_client(app) as (_, client):
        with pytest.raises(RuntimeError, match="audit log full"):
            run_once(client, rg.protect(build([], crash=True)), candidate_key())
        assert client.flush(10)
        (stored,) = [t.trace for t in trace_store(app).read(ROLE, "cfg_b", "candidate")]
    assert stored.tools == ("search", "lookup", "transfer_to_agent", "delete_account", "audit")
    assert stored.steps is not None and stored.steps[-1].error == "RuntimeError: audit log full"
    assert stored.error is not None and stored.error.type == "RuntimeError"
    assert NO_RESULT not in {step.error for step in stored.steps[:2]}


def test_stamps_follow_the_agent_tree() -> None:
    """The same tree keeps its stamps; a sub-agent's new instruction or tool changes them."""
    agent = build([])
    first = rg.stamps(agent)
    assert rg.stamps(agent) == first == rg.stamps(build([]))
    billing = agent.sub_agents[0]
    billing.instruction = "Handle billing, and be quick."
    changed = rg.stamps(agent)
    assert changed["instruction_hash"] != first["instruction_hash"]
    assert changed["tool_schema_hash"] == first["tool_schema_hash"]
    billing.tools = [*billing.tools, lambda: None]
    assert rg.stamps(agent)["tool_schema_hash"] != first["tool_schema_hash"]
