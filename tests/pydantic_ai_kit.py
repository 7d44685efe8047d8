"""The pydantic-ai side of tests/test_integration_pydantic_ai.py: its helpers and the framework's
names, imported by those tests when they run.

pydantic-ai takes seconds of CPU to import; imported at the test module's top level, every
pytest-xdist worker paid that while collecting, whether or not it ran these tests.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from rolegate.integrations import pydantic_ai as rg

__all__ = ["Agent", "AgentInfo", "FunctionModel", "ModelMessage", "ModelResponse",
           "ModelRetry", "RequestUsage", "TextPart", "ToolCallPart", "build", "rg"]


def build(executed: list[str], *, crash: bool = False) -> Agent[None, str]:
    """An agent whose scripted model calls search+lookup together, then delete_account+fail."""

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = len(messages) // 2
        if turn == 0:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "refund"}),
                                        ToolCallPart("lookup", {"id": 7})],
                                 usage=RequestUsage(input_tokens=20, output_tokens=4))
        if turn == 1:
            return ModelResponse(parts=[ToolCallPart("delete_account", {"id": 7}),
                                        ToolCallPart("crash" if crash else "fail", {})],
                                 usage=RequestUsage(input_tokens=30, output_tokens=5))
        return ModelResponse(parts=[TextPart("refund issued")],
                             usage=RequestUsage(input_tokens=40, output_tokens=3))

    agent = Agent(FunctionModel(script, model_name="scripted"), name="support",
                  instructions="Resolve the ticket.", capabilities=[rg.Guard()])

    @agent.tool_plain
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [f"{q}-policy"]

    @agent.tool_plain
    def lookup(id: int) -> dict[str, Any]:
        """Look an order up."""
        executed.append("lookup")
        return {"id": id, "total": 30}

    @agent.tool_plain
    def delete_account(id: int) -> str:
        """Delete the customer's account."""
        executed.append("delete_account")
        return "deleted"

    @agent.tool_plain
    def fail() -> str:
        """A tool that fails and asks the model to retry."""
        executed.append("fail")
        raise ModelRetry("the ledger is locked")

    @agent.tool_plain(name="crash")
    def crash_tool() -> str:
        """A tool whose exception ends the run."""
        executed.append("crash")
        raise RuntimeError("ledger exploded")

    return agent
