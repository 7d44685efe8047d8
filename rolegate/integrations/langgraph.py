"""rolegate for LangGraph: record a finished run's messages, stamp it, refuse tools in ToolNode.

    from rolegate.integrations import langgraph as rg

    resolution = client.resolve("summarizer", job_id)
    tools = rg.tools(resolution["body"], {"read_file": read_file})  # the body's schemas
    node = rg.tool_node(tools)  # a ToolNode whose wrap_tool_call is rolegate's check
    ...  # the graph: a model node with model.bind_tools(tools), `node`, tools_condition
    with client.recorder(resolution, stamps=rg.stamps(model, tools, instructions=...)) as run, \\
            rg.guard(client, run):
        rg.record(run, graph.invoke({"messages": [...]}))

The hook is LangGraph's own: `ToolNode(wrap_tool_call=...)` (and
`awrap_tool_call` for async graphs) sees each call before the tool runs. A call
`client.allowed()` refuses for the run's role is answered with an error
ToolMessage ("refused by rolegate ...") and the tool never runs; the trace keeps
the attempt as a failed step. A call to a tool the node does not hold (the model
made the name up) is answered the same way with `UNOFFERED` and kept as a
failed step too. The wrapper also notes each call and result, so a
run that raises is recorded from them when it leaves the `guard` block.

`record` reads the state's messages: each AIMessage's `tool_calls` in order
(calls of one message share a parallel group), its `usage_metadata` tokens, its
`name` as the agent (graphs of several agents name their AIMessages), a
`transfer_to_<agent>` call as a handoff (the target's calls then carry the
caller as `parent_agent`), each ToolMessage as its call's result (`status
"error"` as its error), and the last AIMessage's text as the output.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolNode

from rolegate.integrations._body import body_tools
from rolegate.integrations._common import (
    ACTIVE,
    ACTIVE_ATTRIBUTE,
    REFUSED,
    UNOFFERED,
    Active,
    CallLog,
    Guarding,
    cached,
)
from rolegate.integrations._common import stamps as _stamps

#: The convention of LangGraph's handoff tools (langgraph-supervisor, langgraph-swarm).
HANDOFF_PREFIX = "transfer_to_"


def tools(body: Mapping[str, Any] | None, implementations: Mapping[str, Callable[..., Any]]
          ) -> list[BaseTool]:
    """The tools a config body offers, as LangChain tools with the body's own schemas.

    Each body tool becomes a `StructuredTool` named as in the body, with its
    description, and its `parameters` JSON schema as the `args_schema` the model
    sees, calling `implementations[name]` with the arguments as keywords. A tool
    in `implementations` the body does not name is not offered: the config decides
    what the agent may call. A body tool without an implementation is a ValueError.
    """
    return [StructuredTool.from_function(func=t.function, name=t.name,
                                         description=t.description, args_schema=t.parameters,
                                         infer_schema=False)
            for t in body_tools(body, implementations)]


def _model_id(model: Any) -> str:
    if isinstance(model, str):
        return model
    bound = getattr(model, "bound", None)  # model.bind_tools(...) wraps the chat model
    if bound is not None:
        model = bound
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _schema(tool: Any) -> Any:
    schema = tool.tool_call_schema if isinstance(tool, BaseTool) else None
    if isinstance(schema, dict):
        return schema
    if schema is not None and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    return None


def stamps(model: Any, tools: Sequence[Any] = (), *, instructions: Any = None,
           agent_version: str | None = None) -> dict[str, str]:
    """The run's stamps: the chat model's id, and hashes of the instructions and tool schemas.

    `model` is the chat model (bound or not) or its name; each tool's schema is
    what LangChain shows the model (`tool_call_schema`).
    """
    parts = (model, instructions, agent_version, *tools)
    return cached(model, parts, lambda: _stamps(
        model_id=_model_id(model), instructions=instructions,
        tools=[{"name": getattr(t, "name", str(t)), "description": getattr(t, "description", None),
                "parameters": _schema(t)} for t in tools],
        agent_version=agent_version or "langgraph"))


def record(run: Any, state: Any, *, error: BaseException | None = None) -> None:
    """Fill the recorder `run` from a finished graph's state (or its list of messages)."""
    messages = state.get("messages", ()) if isinstance(state, Mapping) else state
    active = getattr(run, ACTIVE_ATTRIBUTE, None)
    log = CallLog()
    parents: dict[str, str] = {}
    output: str | None = None
    _read(log, messages or (), parents, active if isinstance(active, Active) else None)
    for message in messages or ():
        if isinstance(message, AIMessage) and not message.tool_calls:
            output = message.text if isinstance(message.text, str) else None
    if isinstance(active, Active):
        _seen_calls(log, active)
    log.fill(run, output=output, error=error, given=_asked(messages or ()))


def _asked(messages: Iterable[Any]) -> Any:
    """The human messages before the model's first answer: the run's prompt."""
    asked = []
    for message in messages:
        if isinstance(message, AIMessage):
            break
        if isinstance(message, HumanMessage):
            asked.append(message.text if isinstance(message.text, str) else message.content)
    return (asked[0] if len(asked) == 1 else asked) or None


def _read(log: CallLog, messages: Iterable[Any], parents: dict[str, str],
          active: Active | None) -> None:
    hidden = active.errors if active is not None else {}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage):
            usage = message.usage_metadata
            if usage:
                log.usage(usage.get("input_tokens"), usage.get("output_tokens"))
            agent = message.name or (active.agent if active is not None else None)
            group = f"message-{index}" if len(message.tool_calls) > 1 else None
            model = (message.response_metadata or {}).get("model_name")
            for call in message.tool_calls:
                name = call["name"]
                log.issue(call.get("id"), name, call.get("args"), agent=agent,
                          parent_agent=parents.get(agent or ""), parallel_group=group,
                          model=model if isinstance(model, str) else None)
                if name.startswith(HANDOFF_PREFIX) and agent:
                    parents.setdefault(name[len(HANDOFF_PREFIX):], agent)
        elif isinstance(message, ToolMessage):
            failure = hidden.get(message.tool_call_id)
            if failure is None and message.status == "error":
                failure = message.text or "error"
            if failure is not None:
                log.complete(message.tool_call_id, error=failure)
            else:
                log.complete(message.tool_call_id, result=_content(message))


def _seen_calls(log: CallLog, active: Active) -> None:
    """Calls the wrapper saw that the state lacks (the run raised before returning one)."""
    for call_id, name, args, agent in active.seen:
        if call_id in log.by_id:
            continue
        log.issue(call_id, name, args, agent=agent)
        if call_id in active.errors:
            log.complete(call_id, error=active.errors[call_id])
        elif call_id in active.results:
            log.complete(call_id, result=active.results[call_id])


def _content(message: ToolMessage) -> Any:
    content = message.content
    return content if isinstance(content, str) else message.text


def _before(request: Any) -> ToolMessage | None:
    """Note the call; a refusal ToolMessage when the node lacks the tool or the role forbids it."""
    active = ACTIVE.get()
    call = request.tool_call
    if active is None:
        return None
    call_id = call.get("id") or ""
    active.seen.append((call_id, call["name"], call.get("args"), None))
    # ToolNode leaves `tool` None for a name it does not hold (validated after the hook).
    answer = UNOFFERED if request.tool is None else (
        None if active.allowed(call["name"]) else REFUSED)
    if answer is None:
        return None
    active.errors[call_id] = answer
    return ToolMessage(content=answer, tool_call_id=call_id, name=call["name"], status="error")


def _after(request: Any, result: Any) -> Any:
    active = ACTIVE.get()
    if active is not None and isinstance(result, ToolMessage):
        active.results[request.tool_call.get("id") or ""] = _content(result)
    return result


def check(request: Any, execute: Callable[[Any], Any]) -> Any:
    """ToolNode's `wrap_tool_call`: refuse a call the run's role forbids, else run it."""
    refused = _before(request)
    return refused if refused is not None else _after(request, execute(request))


async def acheck(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
    """ToolNode's `awrap_tool_call`: the same check for graphs run with `ainvoke`."""
    refused = _before(request)
    return refused if refused is not None else _after(request, await execute(request))


def tool_node(node_tools: Sequence[Any], **options: Any) -> ToolNode:
    """A ToolNode over `node_tools` with rolegate's check as its wrap_tool_call hooks."""
    return ToolNode(node_tools, wrap_tool_call=check, awrap_tool_call=acheck, **options)


def _abort(active: Active, error: BaseException) -> None:
    record(active.run, [], error=error)


def guard(client: Any, run: Any) -> Guarding:
    """The block in which rolegate's ToolNodes check each call against this run's role."""
    return Guarding(client, run, on_abort=_abort)


__all__ = ["REFUSED", "UNOFFERED", "acheck", "check", "guard", "record", "stamps", "tool_node", "tools"]
