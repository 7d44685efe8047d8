"""The LangGraph side of tests/test_integration_langgraph.py: its helpers and the framework's
names, imported by those tests when they run.

LangGraph takes seconds of CPU to import; imported at the test module's top level, every
pytest-xdist worker paid that while collecting, whether or not it ran these tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph

from rolegate.integrations import langgraph as rg

__all__ = ["AIMessage", "BaseMessage", "BaseTool", "END", "GenericFakeChatModel",
           "HumanMessage", "MessagesState", "PROMPT", "START", "ScriptedChatModel",
           "StateGraph", "SystemMessage", "ai", "build", "rg", "tool"]


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's scripted chat model; binding tools keeps the script (it has no real model)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self


def ai(*calls: tuple[str, dict[str, Any], str], text: str = "", tokens: tuple[int, int] = (0, 0)
       ) -> AIMessage:
    """One scripted model turn: its tool calls (name, args, id), text and usage."""
    return AIMessage(text, tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls],
                     usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1],
                                     "total_tokens": sum(tokens)})


def build(executed: list[str], *, crash: bool = False) -> Any:
    """triage calls search+lookup together and hands off to billing, which calls
    delete_account and a failing refund (or an audit whose exception ends the run)."""

    @tool
    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [f"{q}-policy"]

    @tool
    def lookup(id: int) -> dict[str, Any]:
        """Look an order up."""
        executed.append("lookup")
        return {"id": id}

    @tool
    def transfer_to_billing() -> str:
        """Hand the ticket to billing."""
        return "billing has it"

    @tool
    def delete_account(id: int) -> str:
        """Delete the customer's account."""
        executed.append("delete_account")
        return "deleted"

    @tool
    def refund(id: int) -> str:
        """Refund an order (the ledger is down)."""
        executed.append("refund")
        raise ConnectionError("ledger unreachable")

    @tool
    def audit() -> str:
        """An audit whose exception ends the run."""
        executed.append("audit")
        raise RuntimeError("audit log full")

    triage_model = ScriptedChatModel(messages=iter([
        ai(("search", {"q": "refund"}, "c1"), ("lookup", {"id": 7}, "c2"), tokens=(10, 2)),
        ai(("transfer_to_billing", {}, "h1"), tokens=(20, 2))]))
    second = ("audit", {}, "c5") if crash else ("refund", {"id": 7}, "c4")
    billing_model = ScriptedChatModel(messages=iter([
        ai(("delete_account", {"id": 7}, "c3"), second, tokens=(30, 5)),
        ai(text="refunded", tokens=(40, 3))]))
    billing_tools = [delete_account, refund, audit]

    def agent(name: str, model: Any, instructions: str, tools: list[BaseTool]) -> Any:
        bound = model.bind_tools(tools)

        def node(state: MessagesState) -> dict[str, list[BaseMessage]]:
            reply = bound.invoke([SystemMessage(instructions), *state["messages"]])
            reply.name = name  # what create_react_agent(name=...) does: the agent of each turn
            return {"messages": [reply]}
        return node

    def after_model(state: MessagesState) -> str:
        last_message = state["messages"][-1]
        return "tools" if getattr(last_message, "tool_calls", None) else END

    def after_triage_tools(state: MessagesState) -> str:
        return "billing" if state["messages"][-1].name == "transfer_to_billing" else "triage"

    graph = StateGraph(MessagesState)
    graph.add_node("triage", agent("triage", triage_model, "Triage the ticket.",
                                   [search, lookup, transfer_to_billing]))
    graph.add_node("triage_tools", rg.tool_node([search, lookup, transfer_to_billing]))
    graph.add_node("billing", agent("billing", billing_model, "Handle billing.", billing_tools))
    graph.add_node("billing_tools", rg.tool_node(billing_tools,
                                                 handle_tool_errors=not crash))
    graph.add_edge(START, "triage")
    graph.add_conditional_edges("triage", after_model, {"tools": "triage_tools", END: END})
    graph.add_conditional_edges("triage_tools", after_triage_tools)
    graph.add_conditional_edges("billing", after_model, {"tools": "billing_tools", END: END})
    graph.add_edge("billing_tools", "billing")
    return graph.compile()


PROMPT = {"messages": [HumanMessage("refund order 7")]}
