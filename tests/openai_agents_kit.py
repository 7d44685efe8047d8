"""The Agents SDK's side of tests/test_integration_openai_agents.py: a scripted triage
graph and its helpers, imported by those tests when they run.

The SDK takes seconds of CPU to import; imported at the test module's top level, every
pytest-xdist worker paid that while collecting, whether or not it ran these tests.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.exceptions import AgentsException, ModelBehaviorError
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from rolegate.integrations import openai_agents as rg

__all__ = ["NO_TRACING", "Agent", "AgentsException", "ModelBehaviorError", "Runner", "build",
           "rg", "unoffered_agent", "usage"]

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
