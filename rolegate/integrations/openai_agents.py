"""rolegate for the OpenAI Agents SDK: record a finished run, stamp from the agent, refuse tools.

    from rolegate.integrations import openai_agents as rg

    rg.protect(agent)  # once: a tool input guardrail on every function tool, handoffs included
    with client.recorder(client.resolve("support", job_id), stamps=rg.stamps(agent)) as run, \\
            rg.guard(client, run):
        rg.record(run, Runner.run_sync(agent, prompt))

The guardrail rejects a call `client.allowed()` refuses for the run's role before
the tool runs (the model gets "refused by rolegate"; the trace keeps the attempt
as a failed step). A call to a tool the agent does not offer is an attempt too:
under `run_config=rg.run_config()` the SDK answers the model and the run goes on,
and the trace keeps the call as a failed step (`UNOFFERED`); under the SDK's
default the run raises `ModelBehaviorError`, and the step is still recorded
(with the run's error) when the error leaves the `guard` block. The SDK answers a failed tool with a generic string and no
error flag; `protect` also wraps each tool's failure formatter, so the trace
marks the call failed with the exception (without `protect`, a call whose output
is the SDK's default error string is marked failed). A run that raises is
recorded from the exception's run data when it leaves the `guard` block.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agents import Agent, FunctionTool, RunConfig, function_tool
from agents.exceptions import ModelBehaviorError
from agents.items import (
    HandoffCallItem,
    HandoffOutputItem,
    MessageOutputItem,
    ToolCallItem,
    ToolCallOutputItem,
)
from agents.tool import (
    default_tool_error_function,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

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
    callable_name,
)
from rolegate.integrations._common import stamps as _stamps

#: What the SDK answers for a failed tool by default (no error flag goes with it).
_GENERIC_FAILURE = default_tool_error_function(None, Exception())  # type: ignore[arg-type]
_PROTECTED = "_rolegate_protected"
#: The SDK's error for a call to a tool the agent lacks, under its default
#: tool_not_found_behavior (the run's data then holds no trace of the call).
_NOT_FOUND = re.compile(r"^Tool (?P<tool>.+) not found in agent (?P<agent>.+)$")


#: How record() treats each item type (a dict on the exact type: the SDK's items
#: resolve every attribute through a Python __getattribute__, isinstance included).
_CALL, _HANDOFF, _OUTPUT, _MESSAGE = range(4)
_KINDS: dict[type, int] = {ToolCallItem: _CALL, HandoffCallItem: _CALL,
                           HandoffOutputItem: _HANDOFF, ToolCallOutputItem: _OUTPUT,
                           MessageOutputItem: _MESSAGE}


def _kind(item: Any) -> int | None:
    kind = _KINDS.get(type(item))
    if kind is None:  # a subclass of one of them
        kind = next((k for t, k in _KINDS.items() if isinstance(item, t)), None)
    return kind


def record(run: Any, result: Any, *, error: BaseException | None = None) -> None:
    """Fill the recorder `run` from a finished Agents SDK run (a RunResult, or the exception).

    An `AgentsException` carries the run's data up to the failure; it is recorded
    with the exception as the run's error and calls that never returned marked so.
    """
    if isinstance(result, BaseException):
        error, result = result, getattr(result, "run_data", None)
    active = getattr(run, ACTIVE_ATTRIBUTE, None)
    hidden = active.errors if isinstance(active, Active) else {}
    log = CallLog()
    turns = _turns(log, getattr(result, "raw_responses", None) or ())
    parents: dict[str, str] = {}
    models: dict[int, str | None] = {}
    offers: dict[int, frozenset[str]] = {}
    #: Calls to a tool their agent does not offer: failed, whatever the SDK answered.
    unoffered: set[str] = set()
    output: Any = None
    for item in getattr(result, "new_items", None) or ():
        kind = _kind(item)
        if kind == _CALL:
            agent = item.agent
            raw = item.raw_item
            call_id = getattr(raw, "call_id", None)
            name = getattr(raw, "name", None) or type(raw).__name__
            if call_id and type(item) is ToolCallItem and name not in _offered(agent, offers):
                unoffered.add(call_id)
            group, usage = turns.get(call_id or "", (None, None))
            model = models.get(id(agent), "")
            if model == "":
                model = models[id(agent)] = _model_id(agent) or None
            log.issue(call_id, name, getattr(raw, "arguments", None), agent=agent.name,
                      parent_agent=parents.get(agent.name), parallel_group=group, model=model,
                      tokens_in=usage.input_tokens if usage else None,
                      tokens_out=usage.output_tokens if usage else None)
        elif kind == _OUTPUT:
            call_id = _call_id(item.raw_item)
            failure = hidden.get(call_id) if call_id else None
            if failure is None and call_id in unoffered:
                failure = UNOFFERED
            value = item.output
            if failure is None and value == _GENERIC_FAILURE:
                failure = _GENERIC_FAILURE
            if failure is not None:
                log.complete(call_id, error=failure)
            else:
                log.complete(call_id, result=value)
        elif kind == _HANDOFF:
            parents.setdefault(item.target_agent.name, item.source_agent.name)
            log.complete(_call_id(item.raw_item), result={"handoff": item.target_agent.name})
        elif kind == _MESSAGE:
            output = item
    if isinstance(active, Active):
        for call_id, name, arguments, agent_name in active.seen:
            if call_id not in log.by_id:
                log.issue(call_id, name, arguments, agent=agent_name,
                          parent_agent=parents.get(agent_name or ""))
    _add_not_found(log, error, parents)
    final = getattr(result, "final_output", None) if error is None else None
    log.fill(run, output=final if final is not None else _message_text(output), error=error,
             given=getattr(result, "input", None))


def _offered(agent: Any, offers: dict[int, frozenset[str]]) -> frozenset[str]:
    """The tool names `agent` offers the model (function and hosted tools, handoffs)."""
    found = offers.get(id(agent))
    if found is None:
        found = offers[id(agent)] = frozenset(
            [getattr(t, "name", "") for t in getattr(agent, "tools", ()) or ()]
            + [getattr(h, "tool_name", None) or getattr(h, "name", "")
               for h in getattr(agent, "handoffs", ()) or ()])
    return found


def _add_not_found(log: CallLog, error: BaseException | None, parents: dict[str, str]) -> None:
    """The unoffered call that ended the run under the SDK's default: the error names it.

    The SDK raises while reading the model's answer, before any item or hook
    holds the call; its message is all that is left (the arguments are lost).
    """
    found = _NOT_FOUND.match(str(error)) if isinstance(error, ModelBehaviorError) else None
    if found is None:
        return
    agent = found["agent"]
    log.issue(None, found["tool"], None, agent=agent, parent_agent=parents.get(agent))
    log.steps[-1].update(error=UNOFFERED, offered=False)


def run_config(base: RunConfig | None = None) -> RunConfig:
    """`base` (default: a new RunConfig) with unoffered tool calls answered, not raised.

    The model is told the tool is not offered and the run goes on, as in the
    other frameworks; `record` keeps the call as a failed step (`UNOFFERED`).
    """
    return dataclasses.replace(base or RunConfig(), tool_not_found_behavior="return_error_to_model")


def _turns(log: CallLog, responses: Any) -> dict[str, tuple[str | None, Any]]:
    """Add each model turn's tokens to `log`; call id -> (its parallel group when several
    calls came in one response, that turn's usage)."""
    turns: dict[str, tuple[str | None, Any]] = {}
    for index, response in enumerate(responses):
        usage = response.usage
        log.usage(usage.input_tokens, usage.output_tokens)
        ids = [getattr(o, "call_id", None) for o in response.output
               if getattr(o, "type", None) == "function_call"]
        group = f"response-{index}" if len(ids) > 1 else None
        for call_id in ids:
            if call_id:
                turns[call_id] = (group, usage)
    return turns


def _call_id(raw: Any) -> str | None:
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return value if isinstance(value, str) else None


def _message_text(item: Any) -> str | None:
    if item is None:
        return None
    parts = getattr(item.raw_item, "content", ()) or ()
    return "".join(getattr(p, "text", "") or "" for p in parts)


def _agents(agent: Any) -> Iterator[Any]:
    """The agent and every agent reachable through its handoffs, each once."""
    seen: set[int] = set()
    stack = [agent]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for handoff in getattr(current, "handoffs", ()) or ():
            target = handoff if isinstance(handoff, Agent) else getattr(handoff, "agent", None)
            if target is not None:
                stack.append(target)


def _model_id(agent: Any) -> str:
    model = agent.model
    if model is None or isinstance(model, str):
        return model or ""
    return str(getattr(model, "model", None) or type(model).__name__)


def stamps(agent: Any, *, agent_version: str | None = None) -> dict[str, str]:
    """The run's stamps from the agent graph: model id, instruction and tool-schema hashes.

    Recomputed whenever an agent's model, instructions, tools or handoffs are
    replaced (cached by identity otherwise).
    """
    parts: list[Any] = [agent_version]
    for each in _agents(agent):
        parts += [each, each.name, each.model, each.instructions, *each.tools,
                  *(getattr(each, "handoffs", ()) or ())]
    return cached(agent, tuple(parts), lambda: _compute_stamps(agent, agent_version))


def _compute_stamps(agent: Any, agent_version: str | None) -> dict[str, str]:
    instructions = []
    tools = []
    for each in _agents(agent):
        text = each.instructions
        instructions.append([each.name, text if isinstance(text, str) or text is None
                             else callable_name(text)])
        for tool in each.tools:
            tools.append({"agent": each.name, "name": tool.name,
                          "description": getattr(tool, "description", None),
                          "parameters": getattr(tool, "params_json_schema", None)})
        tools.extend({"agent": each.name, "handoff": getattr(h, "name", None)}
                     for h in getattr(each, "handoffs", ()) or ())
    return _stamps(model_id=_model_id(agent), instructions=instructions, tools=tools,
                   agent_version=agent_version or agent.name)


async def _check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    active = ACTIVE.get()
    name = data.context.tool_name
    if active is not None:
        active.seen.append((data.context.tool_call_id, name, data.context.tool_arguments,
                            data.agent.name))
    if active is None or active.allowed(name):
        return ToolGuardrailFunctionOutput.allow()
    active.errors[data.context.tool_call_id] = REFUSED
    return ToolGuardrailFunctionOutput.reject_content(REFUSED)


GUARDRAIL: ToolInputGuardrail[Any] = ToolInputGuardrail(_check, name="rolegate")


def protect(agent: Any) -> Any:
    """Install the rolegate guardrail and failure watch on every function tool; returns `agent`."""
    for each in _agents(agent):
        for tool in each.tools:
            if not isinstance(tool, FunctionTool) or getattr(tool, _PROTECTED, False):
                continue
            tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []), GUARDRAIL]
            _watch_failures(tool)
            setattr(tool, _PROTECTED, True)
    return agent


def _watch_failures(tool: FunctionTool) -> None:
    """Note each failure's exception (by call id) and answer the model exactly as before."""
    formatter = resolve_function_tool_failure_error_function(tool)
    if formatter is None:
        return  # the tool raises: the run aborts and the exception names the failure

    def noted(context: Any, error: Exception) -> Any:
        active = ACTIVE.get()
        call_id = getattr(context, "tool_call_id", None)
        if active is not None and call_id:
            active.errors[call_id] = f"{type(error).__name__}: {error}"
        return formatter(context, error)

    set_function_tool_failure_error_function(tool, noted)


def tools(body: Mapping[str, Any] | None,
          implementations: Mapping[str, Callable[..., Any]]) -> list[FunctionTool]:
    """The tools a config body offers, as function tools the model sees with the body's schemas.

    Each is `function_tool(implementations[name])` (so failures are handled as
    for any decorated tool) renamed and described as in the body, its
    `params_json_schema` replaced by the body's `parameters` (not strict: the
    body's schema is taken as written). The SDK still validates the arguments
    against the function's signature, so the two must agree.
    """
    made: list[FunctionTool] = []
    for each in body_tools(body, implementations):
        tool = function_tool(each.function, name_override=each.name,
                             description_override=each.description, strict_mode=False)
        tool.params_json_schema = each.parameters
        made.append(tool)
    return made


def _abort(active: Active, error: BaseException) -> None:
    record(active.run, error)


def guard(client: Any, run: Any) -> Guarding:
    """The block in which protected agents check each tool call against this run's role."""
    return Guarding(client, run, on_abort=_abort)


__all__ = ["GUARDRAIL", "REFUSED", "UNOFFERED", "guard", "protect", "record", "run_config",
           "stamps", "tools"]
