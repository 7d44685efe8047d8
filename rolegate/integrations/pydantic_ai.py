"""rolegate for pydantic-ai: record a finished run, stamp from the agent, refuse forbidden tools.

    from rolegate.integrations import pydantic_ai as rg

    agent = Agent(model, ..., capabilities=[rg.Guard()])  # once
    with client.recorder(client.resolve("support", job_id), stamps=rg.stamps(agent)) as run, \
            rg.guard(client, run):
        rg.record(run, agent.run_sync(prompt))

`Guard` is a capability whose `prepare_tools` hides every tool `client.allowed()`
refuses for the role of the run in the enclosing `guard` block: the model is not
offered it, and a call to it anyway is answered "unknown tool" by pydantic-ai
without running it (the trace keeps the attempt as a failed step, `REFUSED`,
so the gate still sees what the config tried). A call to a tool the agent does
not hold at all is kept the same way, as `UNOFFERED`. When the run raises, the guard
records what the run did up to there (calls with no result get an error) before
the exception leaves `run_sync`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import ToolDefinition

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
    jsonable,
)
from rolegate.integrations._common import stamps as _stamps

#: pydantic-ai's tool-return outcomes that mean the call did not produce its result.
_FAILED = frozenset({"failed", "retried", "denied", "interrupted"})


def record(run: Any, result: Any, *, error: BaseException | None = None,
           agent: str | None = None) -> None:
    """Fill the recorder `run` from a finished pydantic-ai run.

    `result` is the `AgentRunResult` (or the message list of an aborted run,
    from `capture_run_messages`, with its exception as `error`). Tool calls in
    the order the model issued them, calls of one response as one parallel
    group, results and errors matched by call id, tokens per model turn, the
    final output. `agent` names the agent on every step (default: the agent
    the run's guard saw).
    """
    active = getattr(run, ACTIVE_ATTRIBUTE, None)
    agent = agent or (active.agent if isinstance(active, Active) else None)
    messages: Sequence[ModelMessage] = (result.all_messages() if hasattr(result, "all_messages")
                                        else list(result))
    log = CallLog()
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            _issue(log, index, message, agent)
        elif isinstance(message, ModelRequest):
            _complete(log, message, active if isinstance(active, Active) else None)
    output = getattr(result, "output", None) if error is None else None
    log.fill(run, output=output, error=error, given=_prompt(messages))


def _prompt(messages: Sequence[ModelMessage]) -> Any:
    """The user prompt of the run: the first request's user parts (text, or their content)."""
    for message in messages:
        if isinstance(message, ModelRequest):
            asked = [part.content for part in message.parts if isinstance(part, UserPromptPart)]
            if asked:
                return asked[0] if len(asked) == 1 else asked
    return None


def _issue(log: CallLog, index: int, response: ModelResponse, agent: str | None) -> None:
    usage = response.usage
    log.usage(usage.input_tokens, usage.output_tokens)
    calls = [part for part in response.parts
             if isinstance(part, ToolCallPart) and part.tool_kind != "output"]
    group = f"response-{index}" if len(calls) > 1 else None
    for part in calls:
        log.issue(part.tool_call_id, part.tool_name, part.args, agent=agent,
                  parallel_group=group, model=response.model_name or None,
                  tokens_in=usage.input_tokens, tokens_out=usage.output_tokens)


def _complete(log: CallLog, request: ModelRequest, active: Active | None) -> None:
    for part in request.parts:
        if isinstance(part, ToolReturnPart):
            if part.outcome in _FAILED:
                log.complete(part.tool_call_id,
                             error=_failure(part.tool_name, part.content, active))
            else:
                log.complete(part.tool_call_id, result=part.content)
        elif isinstance(part, RetryPromptPart) and part.tool_name:
            log.complete(part.tool_call_id,
                         error=_failure(part.tool_name, part.content, active))


def _failure(tool: str | None, content: Any, active: Active | None) -> str:
    """Why a call failed: a tool the agent lacks, one the guard hid, or the framework's text.

    pydantic-ai answers both of the first two "unknown tool"; the guard's record of
    what the agent offered tells them apart.
    """
    offered = active.offered if active is not None else None
    if offered is not None and tool is not None:
        if tool not in offered:
            return UNOFFERED
        if active is not None and not active.allowed(tool):
            return REFUSED
    return _text(content)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else str(jsonable(content))


def stamps(agent: Any, *, agent_version: str | None = None) -> dict[str, str]:
    """The run's stamps from the agent itself: model id, instruction and tool-schema hashes.

    Recomputed whenever the agent's model, instructions, system prompts or tool
    objects are replaced (cached by identity otherwise).
    """
    toolsets = agent.toolsets
    parts = (agent.model, agent_version, agent.name, *getattr(agent, "_instructions", ()),
             *getattr(agent, "_system_prompts", ()), *toolsets,
             *(tool for toolset in toolsets for tool in getattr(toolset, "tools", {}).values()))
    return cached(agent, parts, lambda: _compute_stamps(agent, agent_version))


def _compute_stamps(agent: Any, agent_version: str | None) -> dict[str, str]:
    model = agent.model
    model_id = model if isinstance(model, str) else (
        f"{getattr(model, 'system', '')}:{getattr(model, 'model_name', '')}" if model else "")
    instructions = [
        part.instruction if isinstance(part.instruction, str) else callable_name(part.instruction)
        for part in getattr(agent, "_instructions", ())]
    instructions += [p if isinstance(p, str) else callable_name(p)
                     for p in getattr(agent, "_system_prompts", ())]
    return _stamps(model_id=model_id, instructions=instructions, tools=_tool_schemas(agent),
                   agent_version=agent_version or (agent.name or "agent"))


def _tool_schemas(agent: Any) -> list[dict[str, Any]]:
    schemas = []
    for toolset in agent.toolsets:
        for tool in getattr(toolset, "tools", {}).values():
            definition = tool.tool_def
            schemas.append({"name": definition.name, "description": definition.description,
                            "parameters": definition.parameters_json_schema})
    return sorted(schemas, key=lambda s: str(s["name"]))


@dataclass
class Guard(AbstractCapability[Any]):
    """A capability: offer only the tools `client.allowed()` lets the run's role call.

    Given once at construction (`Agent(..., capabilities=[Guard()])`), it guards
    every run inside a `guard(client, run)` block (the run is found through a
    context variable) and lets runs outside any block through. `Guard(client, run)`
    guards that one run instead, passed to `run_sync(..., capabilities=[...])`;
    per-run capabilities cost pydantic-ai about a millisecond of setup a run.
    """

    client: Any = None
    run: Any = None

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not serializable into an agent spec: it holds a live client."""
        return None

    def _active(self) -> Active | None:
        if self.client is not None and self.run is not None:
            active = getattr(self.run, ACTIVE_ATTRIBUTE, None)
            if not isinstance(active, Active):
                active = Guarding(self.client, self.run).active
            return active
        return ACTIVE.get()

    async def prepare_tools(self, ctx: RunContext[Any],
                            tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        """Drop every tool the role's gate forbids, before the model sees the list."""
        active = self._active()
        if active is None:
            return tool_defs
        # The live history of this run; the context on_run_error gets may not hold it.
        active.history = ctx.messages
        if active.agent is None and ctx.agent is not None and ctx.agent.name:
            active.agent = ctx.agent.name
        active.offered = (active.offered or set()) | {d.name for d in tool_defs}
        return [d for d in tool_defs if active.allowed(d.name)]

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> Any:
        """Record what the aborted run did (its messages so far), then let the error go on."""
        active = self._active()
        if active is not None:
            record(active.run, active.history or ctx.messages, error=error)
        raise error


def tools(body: Mapping[str, Any] | None,
          implementations: Mapping[str, Callable[..., Any]]) -> list[Tool[Any]]:
    """The tools a config body offers, as pydantic-ai `Tool`s with the body's JSON schemas.

    `Tool.from_schema`: the model is offered the body's name, description and
    `parameters`; `implementations[name]` runs with the arguments as keywords. A
    function the body does not name is not offered; a body tool with no function
    is a ValueError.
    """
    return [Tool.from_schema(t.function, name=t.name, description=t.description,
                             json_schema=t.parameters)
            for t in body_tools(body, implementations)]


def guard(client: Any, run: Any) -> Guarding:
    """The block in which an agent built with `Guard()` checks each tool against this run."""
    return Guarding(client, run)
