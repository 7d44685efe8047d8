"""OpenInference's span conventions, read as the OTel GenAI ones: pure, no OpenTelemetry import.

Arize's OpenInference instrumentations (`openinference-instrumentation-openai-agents`
and its siblings) mark what a span is with `openinference.span.kind` instead of
`gen_ai.operation.name`, and name its parts their own way. `genai_attributes()`
gives such a span's attributes the GenAI ones `rolegate.spans.assemble` reads, beside
its own (a GenAI attribute the span already has wins):

    openinference.span.kind TOOL    -> gen_ai.operation.name execute_tool
        tool.name                   -> gen_ai.tool.name (else the span's name)
        input.value / output.value  -> gen_ai.tool.call.arguments / .result
        tool_call.id, tool.id       -> gen_ai.tool.call.id
    openinference.span.kind LLM     -> chat
        llm.model_name              -> gen_ai.request.model
        llm.token_count.prompt      -> gen_ai.usage.input_tokens
        llm.token_count.completion  -> gen_ai.usage.output_tokens
        llm.output_messages.<i>.message.role/.content, and each message's
        .message.tool_calls.<j>.tool_call.id
                                    -> gen_ai.output.messages (text and tool_call parts)
    openinference.span.kind AGENT   -> invoke_agent
        agent.name (else graph.node.id) -> gen_ai.agent.name
    output.value on an AGENT span   -> gen_ai.output.messages (one assistant text)

Without this, such a run reads as a run that called no tool: the trial that
found it stored 6 of 6 runs calling `drop_table` as `tools: []`, passed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

SPAN_KIND = "openinference.span.kind"
KINDS = {"TOOL": "execute_tool", "LLM": "chat", "AGENT": "invoke_agent"}
_OUTPUT_MESSAGE = re.compile(
    r"^llm\.output_messages\.(\d+)\.message\.(role|content|tool_calls\.(\d+)\.tool_call\.id)$")


def genai_attributes(attributes: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """A span's attributes (its name `name`) with the GenAI ones its OpenInference ones say.

    `attributes` itself when the span has no OpenInference kind read here.
    """
    kind = attributes.get(SPAN_KIND)
    operation = KINDS.get(kind.upper()) if isinstance(kind, str) else None
    if operation is None:
        return attributes
    attrs = dict(attributes)
    added: dict[str, Any] = {"gen_ai.operation.name": operation}
    if operation == "execute_tool":
        added["gen_ai.tool.name"] = _text(attrs.get("tool.name")) or name
        _copy(attrs, added, "input.value", "gen_ai.tool.call.arguments")
        _copy(attrs, added, "output.value", "gen_ai.tool.call.result")
        _copy(attrs, added, "tool_call.id", "gen_ai.tool.call.id")
        _copy(attrs, added, "tool.id", "gen_ai.tool.call.id")
    elif operation == "chat":
        _copy(attrs, added, "llm.model_name", "gen_ai.request.model")
        _copy(attrs, added, "llm.token_count.prompt", "gen_ai.usage.input_tokens")
        _copy(attrs, added, "llm.token_count.completion", "gen_ai.usage.output_tokens")
        messages = _output_messages(attrs)
        if messages:
            added["gen_ai.output.messages"] = json.dumps(messages)
    else:
        agent = _text(attrs.get("agent.name")) or _text(attrs.get("graph.node.id"))
        if agent:
            added["gen_ai.agent.name"] = agent
        output = attrs.get("output.value")
        if isinstance(output, str) and attrs.get("output.mime_type", "text/plain") != (
                "application/json"):
            added["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": output}]}])
    for attribute, value in added.items():
        attrs.setdefault(attribute, value)
    return attrs


def _copy(attrs: Mapping[str, Any], added: dict[str, Any], source: str, target: str) -> None:
    value = attrs.get(source)
    if value is not None and target not in added:
        added[target] = value


def _output_messages(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The flattened `llm.output_messages.*` attributes as GenAI output messages, in order."""
    found: dict[int, dict[str, Any]] = {}
    for name, value in attrs.items():
        match = _OUTPUT_MESSAGE.match(name)
        if match is None:
            continue
        message = found.setdefault(int(match.group(1)), {"role": "assistant", "parts": [],
                                                         "calls": {}})
        if match.group(2) == "role" and isinstance(value, str):
            message["role"] = value
        elif match.group(2) == "content" and isinstance(value, str):
            message["parts"].append({"type": "text", "content": value})
        elif match.group(3) is not None:
            message["calls"][int(match.group(3))] = value
    out = []
    for index in sorted(found):
        message = found[index]
        calls = [{"type": "tool_call", "id": str(message["calls"][j])}
                 for j in sorted(message["calls"])]
        out.append({"role": message["role"], "parts": message["parts"] + calls})
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
