"""A config's body: what the agent actually runs, served with the binding.

Two modes (the `mode` field says which):

- ``agent``: the model and its parameters, the instructions, and the tools the
  agent may call, each with the JSON Schema of its arguments;
- ``completion``: the model and its parameters, and the messages to send.

Callers get the body on their resolution (`client.resolve(...)["body"]`), so no
caller keeps its own table of prompts, models and tools. The stamps a run is
reported with are derived from it (`stamps_of`): a changed instruction or tool
schema is a changed hash, whoever reports the run.

Pure data: imported by the SDK and by the service.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

#: A body is carried in every binding snapshot: keep it a prompt, not a corpus.
MAX_BODY_BYTES = 256 * 1024
JSON_SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array",
                               "null"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Model(_Frozen):
    """Which model runs the config, and its parameters (temperature, max_tokens, ...)."""

    name: str = Field(min_length=1, max_length=200)
    parameters: dict[str, Any] = Field(default_factory=dict)


class ToolSchema(_Frozen):
    """A tool the agent may call: its name, what it does, the JSON Schema of its arguments."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=4000)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @model_validator(mode="after")
    def _schema(self) -> ToolSchema:
        kind = self.parameters.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        if any(k not in JSON_SCHEMA_TYPES for k in kinds):
            raise ValueError(f"parameters.type: {kind!r} is not a JSON Schema type")
        properties = self.parameters.get("properties", {})
        if not isinstance(properties, dict) or not all(
                isinstance(p, dict) for p in properties.values()):
            raise ValueError("parameters.properties: an object of JSON Schemas")
        required = self.parameters.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError("parameters.required: a list of property names")
        return self


class Message(_Frozen):
    """One message of a completion-mode config."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str = Field(max_length=MAX_BODY_BYTES)


class AgentBody(_Frozen):
    """An agent: model, instructions and tools."""

    mode: Literal["agent"] = "agent"
    model: Model
    instructions: str = Field("", max_length=MAX_BODY_BYTES)
    tools: tuple[ToolSchema, ...] = ()

    @model_validator(mode="after")
    def _unique_tools(self) -> AgentBody:
        names = [tool.name for tool in self.tools]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"tools: each name once, {twice} appear more than once")
        return self


class CompletionBody(_Frozen):
    """A completion: model and messages."""

    mode: Literal["completion"]
    model: Model
    messages: tuple[Message, ...] = Field(min_length=1)


ConfigBody = Annotated[AgentBody | CompletionBody, Field(discriminator="mode")]
BODY: TypeAdapter[AgentBody | CompletionBody] = TypeAdapter(ConfigBody)


def parse_body(raw: Any) -> AgentBody | CompletionBody:
    """Validate a body (a dict; `mode` defaults to agent) and check its encoded size."""
    if isinstance(raw, dict) and "mode" not in raw:
        raw = {**raw, "mode": "agent"}
    return check_size(BODY.validate_python(raw))


def check_size(body: AgentBody | CompletionBody) -> AgentBody | CompletionBody:
    """`body` if its JSON is at most MAX_BODY_BYTES, else ValueError."""
    size = len(body.model_dump_json())
    if size > MAX_BODY_BYTES:
        raise ValueError(f"body: {size} bytes encoded, at most {MAX_BODY_BYTES}")
    return body


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def instruction_hash(body: AgentBody | CompletionBody) -> str:
    """A hash of what the model is told: the instructions, or the messages."""
    if isinstance(body, AgentBody):
        return _digest(body.instructions)
    return _digest([message.model_dump(mode="json") for message in body.messages])


def tool_schema_hash(body: AgentBody | CompletionBody) -> str:
    """A hash of the tools' names, descriptions and argument schemas (order-free)."""
    tools = body.tools if isinstance(body, AgentBody) else ()
    return _digest(sorted((t.model_dump(mode="json") for t in tools),
                          key=lambda tool: str(tool["name"])))


def stamps_of(body: AgentBody | CompletionBody | dict[str, Any],
              agent_version: str) -> dict[str, str]:
    """The stamps of a run of this body by agent code `agent_version`."""
    return {"agent_version": agent_version, **body_hashes(body)}


def body_hashes(body: AgentBody | CompletionBody | dict[str, Any]) -> dict[str, str]:
    """The stamps a body decides: `instruction_hash`, `model_id`, `tool_schema_hash`."""
    parsed = parse_body(body) if isinstance(body, dict) else body
    return {"instruction_hash": instruction_hash(parsed), "model_id": parsed.model.name,
            "tool_schema_hash": tool_schema_hash(parsed)}


def lacking(fast: Any, bodies: Mapping[str, Any], versions: Mapping[str, int]) -> dict[str, int]:
    """The bodies (config -> version) a role's answers carry that `bodies` does not hold yet."""
    out: dict[str, int] = {}
    for answer in fast[:2]:
        if answer is None:
            continue
        for config in (answer["config"], answer.get("shadow")):
            if config and config in versions and config not in bodies:
                out[config] = versions[config]
    return out
