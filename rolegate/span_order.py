"""The order of a run's tool calls, and its clock's tick: what the spans say before the clock.

Calls are listed by their place in the span tree (two calls compare where
their branches part: a call under an earlier turn comes first), there by start
and end, then, on a tie, by the order the issuing model turn listed them
(`gen_ai.tool.call.id` among the `tool_call` parts of its
`gen_ai.output.messages`), then by the order the spans arrived (an SDK exports a span when it ends; a random span id says nothing).
The OTel JS SDK stamps spans in whole milliseconds, so two quick sequential
calls tie on the clock: the clock comes last, and `clock_tick` tells the
caller how coarse it is, so a tie is never read as calls issued together.

Pure: `rolegate.spans.Span` records in, an order out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, TypeVar


class _Span(Protocol):
    """What ordering reads of a `rolegate.spans.Span`."""

    @property
    def span_id(self) -> str: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


S = TypeVar("S", bound=_Span)

TOOL_CALL_ID = "gen_ai.tool.call.id"


def clock_tick(spans: Iterable[_Span]) -> int:
    """The run's clock resolution in ns: the largest power of ten up to 1 ms dividing every stamp."""
    tick = 1_000_000
    for span in spans:
        while tick > 1 and (span.start_ns % tick or span.end_ns % tick):
            tick //= 10
    return tick


def call_order(calls: list[S], by_id: Mapping[str, S], chats: list[S],
               arrival: Mapping[str, int]) -> list[S]:
    """The calls in the order the spans say: tree place, issuing turn's order, clock, arrival."""
    listed: dict[str, int] = {}
    for chat in chats:
        for position, call_id in enumerate(_tool_call_ids(chat)):
            listed.setdefault(call_id, position)

    def place(span: _Span) -> tuple[int, int, int, int]:
        call_id = _text(span.attributes.get(TOOL_CALL_ID))
        sequence = listed.get(call_id, len(listed)) if call_id else len(listed)
        return (span.start_ns, span.end_ns, sequence, arrival.get(span.span_id, 0))

    def key(call: S) -> tuple[Any, ...]:
        # The path from the root down to the call: siblings compare at the level
        # where their branches part, so a call under an earlier turn comes first.
        chain = [call]
        seen = {call.span_id}
        while chain[-1].parent_id in by_id and chain[-1].parent_id not in seen:
            parent = by_id[chain[-1].parent_id]  # type: ignore[index]
            seen.add(parent.span_id)
            chain.append(parent)
        return tuple(place(span) for span in reversed(chain))

    return sorted(calls, key=key)


def _tool_call_ids(chat: _Span) -> list[str]:
    """The ids of the tool calls a model turn listed, in its order."""
    messages = _maybe_json(chat.attributes.get("gen_ai.output.messages"))
    ids: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        for part in message.get("parts", ()) if isinstance(message, dict) else ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and part.get("id"):
                ids.append(str(part["id"]))
    return ids


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
