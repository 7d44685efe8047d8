"""rolegate for Google ADK: record a finished run's events, stamp from the agent, refuse tools.

    from rolegate.integrations import google_adk as rg

    rg.protect(agent)  # once: callbacks on the agent and every sub-agent
    with client.recorder(client.resolve("support", job_id), stamps=rg.stamps(agent)) as run, \\
            rg.guard(client, run):
        rg.record(run, [e async for e in runner.run_async(user_id=u, session_id=s, new_message=m)])

`protect` puts a `before_tool_callback` first in each agent's chain: a call
`client.allowed()` refuses for the run's role is answered `{"error": "refused by
rolegate ..."}` and the tool never runs (the trace keeps the attempt as a failed
step). A call to a tool the agent does not hold (ADK stands an empty `BaseTool`
in for it) is answered `{"error": UNOFFERED}` and kept as a failed step too.
Its `on_tool_error_callback` notes a tool's exception by call id, and
`after_tool_callback` each result, so a run aborted by a raising tool (ADK lets
the exception end the run) is still recorded, when it leaves the `guard` block,
with the calls made so far and the one that raised.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

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

_PROTECTED = "_rolegate_protected"


def record(run: Any, events: Iterable[Any], *, error: BaseException | None = None) -> None:
    """Fill the recorder `run` from the events of one ADK invocation, in the order yielded.

    Calls of one model event form a parallel group; results are matched by
    call id; `transfer_to_agent` appears as the step it is and makes the target's
    steps carry the caller as `parent_agent`; tokens come from each model event's
    usage metadata; the output is the last agent text.
    """
    active = getattr(run, ACTIVE_ATTRIBUTE, None)
    hidden = active.errors if isinstance(active, Active) else {}
    log = CallLog()
    parents: dict[str, str] = {}
    output: str | None = None
    for index, event in enumerate(events):
        author = event.author
        usage = event.usage_metadata
        if usage is not None:
            log.usage(usage.prompt_token_count, usage.candidates_token_count)
        content = event.content
        parts = (content.parts if content is not None else None) or ()
        # One pass over the parts: calls, responses and text (most events hold one kind).
        calls, responses, texts = [], [], []
        for part in parts:
            if part.function_call is not None:
                calls.append(part.function_call)
            if part.function_response is not None:
                responses.append(part.function_response)
            if part.text and not part.thought:
                texts.append(part.text)
        if calls:
            group = f"event-{index}" if len(calls) > 1 else None
            model = getattr(event, "model_version", None) or None
            tokens_in = usage.prompt_token_count if usage else None
            tokens_out = usage.candidates_token_count if usage else None
            for call in calls:
                log.issue(call.id, call.name or "", call.args, agent=author,
                          parent_agent=parents.get(author), parallel_group=group,
                          model=model, tokens_in=tokens_in, tokens_out=tokens_out)
        for response in responses:
            failure = hidden.get(response.id or "")
            if failure is not None:
                log.complete(response.id, error=failure)
            else:
                log.complete(response.id, result=_unwrap(response.response))
        actions = event.actions
        target = actions.transfer_to_agent if actions else None
        if target:
            parents.setdefault(target, author)
        if texts and author != "user":
            output = "".join(texts)
    if isinstance(active, Active):
        _add_unseen(log, active, parents)
    given = active.given if isinstance(active, Active) else None
    log.fill(run, output=output if error is None else None, error=error, given=given)


def _add_unseen(log: CallLog, active: Active, parents: dict[str, str]) -> None:
    """Calls the callbacks saw that the events lost (a run aborted mid-call)."""
    for call_id, name, arguments, agent in active.seen:
        if call_id in log.by_id:
            continue
        log.issue(call_id, name, arguments, agent=agent, parent_agent=parents.get(agent or ""))
        if call_id in active.errors:
            log.complete(call_id, error=active.errors[call_id])
        elif call_id in active.results:
            log.complete(call_id, result=active.results[call_id])


def _unwrap(response: Any) -> Any:
    """ADK wraps a non-dict tool return as {"result": value}; give back the value."""
    if isinstance(response, dict) and set(response) == {"result"}:
        return response["result"]
    return response


def _agents(agent: Any) -> Iterator[Any]:
    seen: set[int] = set()
    stack = [agent]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(reversed(getattr(current, "sub_agents", ()) or ()))


def _model_id(agent: Any) -> str:
    model = getattr(agent, "model", "")
    return model if isinstance(model, str) else str(getattr(model, "model", "") or "")


def _tool_schema(tool: Any) -> dict[str, Any]:
    if isinstance(tool, BaseTool):
        declaration = getattr(tool, "_get_declaration", lambda: None)()
        return {"name": tool.name, "description": tool.description,
                "declaration": declaration.model_dump(mode="json", exclude_none=True)
                if declaration is not None else None}
    if callable(tool):
        return {"name": getattr(tool, "__name__", callable_name(tool)),
                "description": inspect.getdoc(tool), "signature": str(inspect.signature(tool))}
    return {"name": callable_name(tool)}


def stamps(agent: Any, *, agent_version: str | None = None) -> dict[str, str]:
    """The run's stamps from the agent tree: model id, instruction and tool-schema hashes.

    Recomputed whenever an agent's model, instruction or tools are replaced
    (cached by identity otherwise).
    """
    parts: list[Any] = [agent_version]
    for each in _agents(agent):
        parts += [each, each.name, getattr(each, "model", None),
                  getattr(each, "instruction", None), *getattr(each, "tools", ())]
    return cached(agent, tuple(parts), lambda: _compute_stamps(agent, agent_version))


def _compute_stamps(agent: Any, agent_version: str | None) -> dict[str, str]:
    instructions: list[Any] = []
    tools: list[dict[str, Any]] = []
    for each in _agents(agent):
        text = getattr(each, "instruction", None)
        instructions.append([each.name, text if isinstance(text, str) or text is None
                             else callable_name(text)])
        tools.extend({"agent": each.name, **_tool_schema(t)} for t in getattr(each, "tools", ()))
    return _stamps(model_id=_model_id(agent), instructions=instructions, tools=tools,
                   agent_version=agent_version or agent.name)


def _started(callback_context: Any) -> None:
    """Note what the invocation was asked: ADK's events do not carry the user's message."""
    active = ACTIVE.get()
    content = getattr(callback_context, "user_content", None)
    if active is not None and active.given is None and content is not None:
        texts = [part.text for part in content.parts or () if part.text]
        active.given = ("".join(texts) if texts
                        else content.model_dump(mode="json", exclude_none=True))


def _before(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> Any:
    active = ACTIVE.get()
    if active is None:
        return None
    call_id = tool_context.function_call_id or ""
    active.seen.append((call_id, tool.name, dict(args), tool_context.agent_name))
    # ADK answers an unknown name after the before-tool callbacks, with a bare
    # BaseTool standing in for the tool: every real tool is a subclass.
    answer = UNOFFERED if type(tool) is BaseTool else (
        None if active.allowed(tool.name) else REFUSED)
    if answer is None:
        return None
    active.errors[call_id] = answer
    return {"error": answer}


def _after(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext,
           tool_response: Any) -> None:
    active = ACTIVE.get()
    if active is not None and tool_context.function_call_id:
        active.results[tool_context.function_call_id] = tool_response


def _failed(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext,
            error: Exception) -> None:
    active = ACTIVE.get()
    if active is not None and tool_context.function_call_id:
        active.errors[tool_context.function_call_id] = f"{type(error).__name__}: {error}"


def protect(agent: Any) -> Any:
    """Put rolegate's tool callbacks first on the agent and every sub-agent; returns `agent`."""
    for each in _agents(agent):
        if getattr(each, _PROTECTED, False) or not hasattr(each, "before_tool_callback"):
            continue
        each.before_tool_callback = [_before, *_callbacks(each.before_tool_callback)]
        each.after_tool_callback = [_after, *_callbacks(each.after_tool_callback)]
        each.on_tool_error_callback = [_failed, *_callbacks(each.on_tool_error_callback)]
        each.before_agent_callback = [_started, *_callbacks(each.before_agent_callback)]
        object.__setattr__(each, _PROTECTED, True)
    return agent


def _callbacks(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


class _BodyTool(BaseTool):
    """An ADK tool declared with a config body's JSON schema instead of a Python signature."""

    def __init__(self, name: str, description: str, parameters: dict[str, Any],
                 function: Callable[..., Any]) -> None:
        super().__init__(name=name, description=description)
        self.parameters = parameters
        self.function = function

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema=self.parameters)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        result = self.function(**args)
        return await result if inspect.isawaitable(result) else result


def tools(body: Mapping[str, Any] | None,
          implementations: Mapping[str, Callable[..., Any]]) -> list[BaseTool]:
    """The tools a config body offers, declared to the model with the body's own schemas.

    ADK's `FunctionTool` builds a declaration from a Python signature and
    docstring; these tools declare the body's name, description and `parameters`
    JSON schema instead (`parameters_json_schema`), and call
    `implementations[name]` with the model's arguments as keywords. A function the
    body does not name is not offered; a body tool with no function is a ValueError.
    """
    return [_BodyTool(t.name, t.description, t.parameters, t.function)
            for t in body_tools(body, implementations)]


def _abort(active: Active, error: BaseException) -> None:
    record(active.run, (), error=error)


def guard(client: Any, run: Any) -> Guarding:
    """The block in which protected agents check each tool call against this run's role."""
    return Guarding(client, run, on_abort=_abort)
