"""google-adk's side of tests/test_integration_google_adk.py: its helpers and the framework's
names, imported by those tests when they run.

google-adk takes seconds of CPU to import; imported at the test module's top level, every
pytest-xdist worker paid that while collecting, whether or not it ran these tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from rolegate import Client
from rolegate.integrations import google_adk as rg
from tests.agent_support import ROLE

__all__ = ["BaseLlm", "InMemoryRunner", "LlmAgent", "LlmRequest", "LlmResponse",
           "ScriptedLlm", "build", "call", "rg", "run_once", "types"]


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
