"""OpenTelemetry GenAI spans in, one rolegate trace out: pure, no OpenTelemetry import.

The router's OTLP ingest (`POST /v1/traces` with OTLP bodies) and the in-process
`rolegate.integrations.otel.SpanProcessor` both turn what they receive into `Span`
records and call `assemble` on one trace id's spans once its root span ended, so
the two paths build the same trace from the same spans.

What is read (the GenAI semantic conventions, plus rolegate's own attributes):

- where the run belongs: `rolegate.role`, `rolegate.config`, `rolegate.arm`,
  `rolegate.key` on the root span, else on the resource; `rolegate.rule` and
  `rolegate.attr.<name>` (the rule's attributes and the unit's: `rule`, `attributes`);
- steps: `execute_tool` spans (`gen_ai.tool.name`, `gen_ai.tool.call.arguments`,
  `gen_ai.tool.call.result`, an ERROR status or `error.type` for a failed call),
  in the order they started; the `gen_ai.agent.name` of the nearest enclosing
  `invoke_agent` span (and of the one above it: `parent_agent`); calls under one
  parent whose times overlap share a `parallel_group`;
- tokens and models: `chat` spans (`gen_ai.usage.input_tokens`/`output_tokens`,
  `gen_ai.response.model` or `gen_ai.request.model`); a step carries those of the
  model turn that issued it (the agent's last chat span that ended before the
  call started);
- the output: `rolegate.output`, else the last assistant text of
  `gen_ai.output.messages` (root span first, then the last chat span);
- stamps: `rolegate.agent_version`, `rolegate.instruction_hash`, `rolegate.model_id`,
  `rolegate.tool_schema_hash` (root, else resource); the model id defaults to the
  first chat span's model; any field a run declares: `rolegate.trace.<field>`.

OpenInference's conventions (`openinference.span.kind` TOOL/LLM/AGENT, `tool.name`,
`llm.token_count.*`) are read as their GenAI counterparts (`rolegate.openinference`).
A run none of whose spans follows a convention read here (and whose root names
no `rolegate.output`) is `judged: false`: counted apart, never a pass.

Order. Tool calls are listed by what the spans say before the clock: by their
place in the span tree (a call under an earlier turn comes first), then by
start, then by the order the issuing model turn listed them
(`gen_ai.tool.call.id` in its output messages), then by the order the spans
arrived (an SDK exports a span when it ends). The clock is read only as finely
as the stamps carry (`rolegate.span_order.Clock`): the OTel JS SDK stamps starts
in whole milliseconds and ends as start plus duration, so there two calls are
parallel only when they overlap by more than a millisecond, and ends never
order calls; the issuing turn of a call is the model turn that listed its id,
else the agent's last chat span that ended by the time the call started.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolegate.openinference import genai_attributes
from rolegate.span_order import Clock, call_order, clock_of, listed_calls
from rolegate.trace import MAX_ATTRIBUTES, declared_attributes

ROLE = "rolegate.role"
CONFIG = "rolegate.config"
ARM = "rolegate.arm"
KEY = "rolegate.key"
RUN_ID = "rolegate.run_id"
OUTPUT = "rolegate.output"
PLACEMENT = (ROLE, CONFIG, ARM, KEY)
#: What decided the run's arm: the targeting rule, and the job attributes (`rolegate.attr.<name>`).
RULE = "rolegate.rule"
ATTRIBUTE_PREFIX = "rolegate.attr."
STAMPS = {"agent_version": "rolegate.agent_version",
          "instruction_hash": "rolegate.instruction_hash",
          "model_id": "rolegate.model_id",
          "tool_schema_hash": "rolegate.tool_schema_hash"}

OPERATION = "gen_ai.operation.name"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
CHAT_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
TOOL_NAME = "gen_ai.tool.name"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
TOOL_CALL_ID = "gen_ai.tool.call.id"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
#: A stamp no span names: the trace model requires every stamp to be non-empty.
UNKNOWN = "unknown"
_KNOWN_OPERATIONS = CHAT_OPERATIONS | {INVOKE_AGENT, EXECUTE_TOOL, "create_agent",
                                       "embeddings"}


class IncompleteRun(ValueError):
    """The spans of a finished run do not say enough to build its trace (e.g. no role)."""


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span, reduced to what a trace needs (ids as lowercase hex)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)
    error: bool = False
    status_message: str = ""
    resource: Mapping[str, Any] = field(default_factory=dict)

    @property
    def operation(self) -> str:
        """The GenAI operation: `gen_ai.operation.name`, else the span name's first word."""
        named = self.attributes.get(OPERATION)
        if isinstance(named, str) and named:
            return named
        first = self.name.split(" ", 1)[0]
        return first if first in _KNOWN_OPERATIONS else ""

    @property
    def tool(self) -> str | None:
        """The tool an `execute_tool` span ran, else None."""
        if self.operation != EXECUTE_TOOL:
            return None
        name = self.attributes.get(TOOL_NAME)
        if isinstance(name, str) and name:
            return name
        rest = self.name.split(" ", 1)
        return rest[1] if len(rest) == 2 and rest[1] else None

    def to_json(self) -> list[Any]:
        """A compact JSON-ready form (for pending spans kept between export batches)."""
        return [self.trace_id, self.span_id, self.parent_id, self.name, self.start_ns,
                self.end_ns, dict(self.attributes), self.error, self.status_message,
                dict(self.resource)]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Span:
        """The inverse of `to_json`."""
        (trace_id, span_id, parent_id, name, start_ns, end_ns, attributes, error,
         status_message, resource) = data
        return cls(trace_id, span_id, parent_id, name, int(start_ns), int(end_ns),
                   attributes, bool(error), status_message, resource)


def placement(*sources: Mapping[str, Any]) -> dict[str, str]:
    """The rolegate.* placement attributes (role, config, arm, key; rule and job attributes)
    found first in `sources`."""
    found: dict[str, str] = {}
    for name in PLACEMENT:
        for source in sources:
            value = source.get(name)
            if isinstance(value, str) and value:
                found[name] = value
                break
    found.update((name, value) for source in reversed(sources) for name, value in source.items()
                 if (name == RULE or name.startswith(ATTRIBUTE_PREFIX)) and isinstance(value, str))
    return found


def decided_by(where: Mapping[str, str]) -> dict[str, Any]:
    """The trace's `rule` and `attributes` from placement attributes (only those it can hold)."""
    out: dict[str, Any] = {}
    rule = where.get(RULE)
    if rule and len(rule) <= 64:
        out["rule"] = rule
    attributes = {name[len(ATTRIBUTE_PREFIX):]: value for name, value in where.items()
                  if name.startswith(ATTRIBUTE_PREFIX) and len(name) > len(ATTRIBUTE_PREFIX)}
    if attributes:
        out["attributes"] = dict(sorted(attributes.items())[:MAX_ATTRIBUTES + 1])
    return out


def root_of(spans: Iterable[Span]) -> Span | None:
    """The run's root: the earliest span with no parent, or None while it has not arrived."""
    roots = [span for span in spans if not span.parent_id]
    return min(roots, key=lambda s: (s.start_ns, s.span_id)) if roots else None


def assemble(spans: Sequence[Span], *,
             fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The trace body (for `Trace.model_validate`) of one finished run's spans.

    Duplicate span ids (a retried export) count once. Placement is read from the
    root span, then its resource, then `fallback` (what earlier spans named).
    Raises IncompleteRun when there is no root span or nothing names role,
    config and arm.
    """
    arrival: dict[str, int] = {}
    by_id: dict[str, Span] = {}
    for span in spans:
        arrival.setdefault(span.span_id, len(arrival))
        attributes = genai_attributes(span.attributes, span.name)
        by_id[span.span_id] = (span if attributes is span.attributes
                               else dataclasses.replace(span, attributes=attributes))
    root = root_of(by_id.values())
    if root is None:
        raise IncompleteRun("the run has no root span (a span without a parent)")
    where = placement(root.attributes, root.resource, fallback or {})
    missing = [name for name in (ROLE, CONFIG, ARM) if name not in where]
    if missing:
        raise IncompleteRun(f"neither the root span nor its resource (nor an earlier span) "
                            f"has the attribute(s) {', '.join(missing)}")
    clock = clock_of(by_id.values())
    if clock.ends_derived:  # an end is its start plus a duration: it orders nothing
        ordered = sorted(by_id.values(), key=lambda s: (s.start_ns, arrival[s.span_id]))
    else:
        ordered = sorted(by_id.values(),
                         key=lambda s: (s.start_ns, s.end_ns, arrival[s.span_id]))
    chats = [span for span in ordered if span.operation in CHAT_OPERATIONS]
    body: dict[str, Any] = {
        "run_id": (_text(root.attributes.get(RUN_ID)) or _text((fallback or {}).get(RUN_ID))
                   or root.trace_id),
        "role": where[ROLE], "config": where[CONFIG], "arm": where[ARM],
        "key": where.get(KEY, ""),
        "steps": _steps(ordered, by_id, chats, arrival, clock),
        "latency_s": max(0, root.end_ns - root.start_ns) / 1e9,
        "stamps": _stamps(root, chats),
        "time": root.end_ns / 1e9,
        **decided_by(where), **declared_attributes(root.resource, root.attributes),
    }
    tokens_in = _sum(chats, INPUT_TOKENS)
    tokens_out = _sum(chats, OUTPUT_TOKENS)
    if tokens_in is not None or tokens_out is not None:
        body["tokens_in"], body["tokens_out"] = tokens_in or 0, tokens_out or 0
    output = _output(root, chats)
    body["output_text"] = output or ""
    body["answered"] = bool(output.strip()) if output is not None else not root.error
    if root.error:
        body["error"] = {"type": _text(root.attributes.get(ERROR_TYPE)) or "error",
                         "message": root.status_message[:4000]}
    if OUTPUT not in root.attributes and not any(s.operation for s in ordered):
        body["judged"] = False  # no span says what the run did: not a tool-less pass
    return body


def _steps(ordered: list[Span], by_id: Mapping[str, Span], chats: list[Span],
           arrival: Mapping[str, int], clock: Clock) -> list[dict[str, Any]]:
    calls = call_order([span for span in ordered if span.tool is not None], by_id, chats,
                       arrival, clock)
    groups = _parallel_groups(calls, clock)
    listed = listed_calls(chats)
    steps = []
    for span in calls:
        step: dict[str, Any] = {"tool": span.tool, "args": _arguments(span),
                                "latency_s": max(0, span.end_ns - span.start_ns) / 1e9}
        if TOOL_RESULT in span.attributes:
            step["result"] = _maybe_json(span.attributes[TOOL_RESULT])
        if span.error or span.attributes.get(ERROR_TYPE):
            step["error"] = (span.status_message or _text(span.attributes.get(ERROR_TYPE))
                             or "error")
        agents = _agents_above(span, by_id)
        if agents:
            step["agent"] = agents[0][1]
            if len(agents) > 1:
                step["parent_agent"] = agents[1][1]
        if span.span_id in groups:
            step["parallel_group"] = groups[span.span_id]
        turn = _issuing_turn(span, agents[0][0] if agents else None, chats, by_id, clock,
                             listed, arrival)
        if turn is not None:
            model = _model(turn)
            if model:
                step["model"] = model
            for key, attribute in (("tokens_in", INPUT_TOKENS), ("tokens_out", OUTPUT_TOKENS)):
                value = turn.attributes.get(attribute)
                if isinstance(value, int) and value >= 0:
                    step[key] = value
        steps.append(step)
    return steps


def _parallel_groups(calls: list[Span], clock: Clock) -> dict[str, str]:
    """Calls under one parent whose times overlap were issued together: span id -> group id.

    Overlap means by more than one tick of the clock (`Clock.overlaps`): stamps
    that tie (two quick sequential calls in one millisecond) do not make calls parallel.
    """
    groups: dict[str, str] = {}
    by_parent: dict[str | None, list[Span]] = {}
    for span in calls:
        by_parent.setdefault(span.parent_id, []).append(span)
    for siblings in by_parent.values():
        clusters: list[list[Span]] = []
        end = 0
        for span in siblings:
            if clusters and clock.overlaps(span.start_ns, end):
                clusters[-1].append(span)
                end = max(end, span.end_ns)
            else:
                clusters.append([span])
                end = span.end_ns
        for cluster in clusters:
            if len(cluster) > 1:
                for member in cluster:
                    groups[member.span_id] = cluster[0].span_id
    return groups


def _agents_above(span: Span, by_id: Mapping[str, Span]) -> list[tuple[str, str]]:
    """(span id, agent name) of each enclosing invoke_agent span, nearest first, names deduped."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    parent = span.parent_id
    while parent and parent in by_id and parent not in seen:
        seen.add(parent)
        above = by_id[parent]
        name = _text(above.attributes.get(AGENT_NAME))
        if above.operation == INVOKE_AGENT and name and (not found or found[-1][1] != name):
            found.append((above.span_id, name))
        parent = above.parent_id
    return found


def _issuing_turn(call: Span, agent_span: str | None, chats: list[Span],
                  by_id: Mapping[str, Span], clock: Clock,
                  listed: Mapping[str, tuple[int, int]],
                  arrival: Mapping[str, int]) -> Span | None:
    """The model turn that listed the call's id; else the agent's last chat span that
    ended by the time the call started, as far as the stamps can tell.

    Where ends are derived from starts (`Clock.ends_derived`) a chat begun in the
    call's millisecond may have ended before it or after it: the one that issued
    the call also arrived before it (an SDK exports a span when it ends), and the
    last of those to arrive is the nearest.
    """
    call_id = call.attributes.get(TOOL_CALL_ID)
    if isinstance(call_id, str) and call_id in listed:
        return chats[listed[call_id][0]]
    derived = clock.ends_derived
    chosen = None
    for chat in chats:
        if not clock.ended_by(chat, call.start_ns):
            continue
        if derived and arrival[chat.span_id] > arrival[call.span_id]:
            continue
        if agent_span is not None and _enclosing_agent(chat, by_id) != agent_span:
            continue
        if chosen is None or (arrival[chat.span_id] > arrival[chosen.span_id] if derived
                              else chat.end_ns >= chosen.end_ns):
            chosen = chat
    return chosen


def _enclosing_agent(span: Span, by_id: Mapping[str, Span]) -> str | None:
    agents = _agents_above(span, by_id)
    return agents[0][0] if agents else None


def _stamps(root: Span, chats: list[Span]) -> dict[str, str]:
    stamps = {}
    for stamp, attribute in STAMPS.items():
        stamps[stamp] = (_text(root.attributes.get(attribute))
                         or _text(root.resource.get(attribute)) or "")
    if not stamps["model_id"]:
        stamps["model_id"] = next((m for m in map(_model, chats) if m), UNKNOWN)
    if not stamps["agent_version"]:
        stamps["agent_version"] = _text(root.resource.get("service.version")) or UNKNOWN
    return {stamp: value or UNKNOWN for stamp, value in stamps.items()}


def _output(root: Span, chats: list[Span]) -> str | None:
    explicit = root.attributes.get(OUTPUT)
    if isinstance(explicit, str):
        return explicit
    for span in [root, *reversed(chats)]:
        text = _assistant_text(span.attributes.get(OUTPUT_MESSAGES))
        if text is not None:
            return text
    return None


def _assistant_text(raw: Any) -> str | None:
    """The text parts of the last assistant message in `gen_ai.output.messages`."""
    messages = _maybe_json(raw)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role", "assistant") != "assistant":
            continue
        parts = message.get("parts")
        if isinstance(parts, list):
            texts = [part.get("content") for part in parts
                     if isinstance(part, dict) and part.get("type") == "text"]
            return "".join(t for t in texts if isinstance(t, str))
    return None


def _model(span: Span) -> str:
    return (_text(span.attributes.get(RESPONSE_MODEL)) or _text(span.attributes.get(REQUEST_MODEL))
            or "")


def _sum(spans: list[Span], attribute: str) -> int | None:
    values = [span.attributes.get(attribute) for span in spans]
    counted = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return sum(counted) if counted else None


def _arguments(span: Span) -> dict[str, Any]:
    raw = span.attributes.get(TOOL_ARGUMENTS)
    if raw is None:
        return {}
    value = _maybe_json(raw)
    return value if isinstance(value, dict) else {"arguments": value}


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
