"""The order of a run's tool calls, and what its clock can tell: what the spans say first.

Calls are listed by their place in the span tree (two calls compare where
their branches part: a call under an earlier turn comes first), there by start
time, then, on a tie, by the order the issuing model turn listed them
(`gen_ai.tool.call.id` among the `tool_call` parts of its
`gen_ai.output.messages`), then by the order the spans arrived (an SDK exports
a span when it ends; a random span id says nothing).

The clock is read only as finely as the stamps carry (`Clock`). The OTel JS SDK
stamps a span's start with `Date.now()`, in whole milliseconds, and its end as
that start plus a sub-millisecond duration: both stamps are early by the same
unknown fraction of a millisecond, so two quick sequential calls started in one
millisecond tie on the start, and their ends (each call's own duration) say
nothing about which came first. Such a run is detected (every start a whole
millisecond, some end finer), its ends are not used to order calls, and two
calls are parallel only when they overlap by more than one tick of the starts.
The Python SDK stamps both ends with `time_ns()`: there the clock decides.

Pure: `rolegate.spans.Span` records in, an order out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
#: The coarsest tick looked for: a clock stamping whole milliseconds.
MAX_TICK_NS = 1_000_000


@dataclass(frozen=True)
class Clock:
    """What a run's stamps can tell: their tick, and whether ends were stamped on their own.

    `tick` (ns) is the coarsest power of ten up to 1 ms dividing every start
    stamp. `ends_derived` is True when the ends are finer than the starts: an
    end is then the start plus a measured duration (the OTel JS SDK), early by
    the same fraction of a tick as its start, so it cannot order two calls.
    """

    tick: int = 1
    ends_derived: bool = False

    def ended_by(self, span: _Span, when: int) -> bool:
        """Whether `span` may have ended by `when` (a start stamp), given the stamps' error."""
        slack = self.tick if self.ends_derived else 0
        return span.end_ns - slack <= when

    def overlaps(self, start: int, end: int) -> bool:
        """Whether a call stamped to start at `start` began before one that ended at `end`.

        By more than one tick: stamps that tie, or differ by a rounding, do not
        make two calls parallel.
        """
        return start < end - self.tick


def clock_of(spans: Iterable[_Span]) -> Clock:
    """The clock a run's spans were stamped with (see `Clock`)."""
    start_tick = end_tick = MAX_TICK_NS
    for span in spans:
        while start_tick > 1 and span.start_ns % start_tick:
            start_tick //= 10
        while end_tick > 1 and span.end_ns % end_tick:
            end_tick //= 10
    return Clock(tick=start_tick, ends_derived=end_tick < start_tick)


def listed_calls(chats: Iterable[_Span]) -> dict[str, tuple[int, int]]:
    """Tool call id -> (the index in `chats` of the turn that listed it, its place in that list)."""
    listed: dict[str, tuple[int, int]] = {}
    for turn, chat in enumerate(chats):
        for position, call_id in enumerate(_tool_call_ids(chat)):
            listed.setdefault(call_id, (turn, position))
    return listed


def call_order(calls: list[S], by_id: Mapping[str, S], chats: list[S],
               arrival: Mapping[str, int], clock: Clock | None = None) -> list[S]:
    """The calls in the order the spans say: tree place, start, issuing turn's order, arrival.

    The end breaks a tie of starts only when the ends were stamped on their own.
    """
    clock = clock or Clock()
    listed = {call_id: position for call_id, (_, position) in listed_calls(chats).items()}
    unlisted = len(listed)

    def sequence(span: _Span) -> int:
        call_id = _text(span.attributes.get(TOOL_CALL_ID))
        return listed.get(call_id, unlisted) if call_id else unlisted

    place: Callable[[_Span], tuple[int, ...]]
    if clock.ends_derived:
        def place(span: _Span) -> tuple[int, ...]:
            return (span.start_ns, sequence(span), arrival.get(span.span_id, 0))
    else:
        def place(span: _Span) -> tuple[int, ...]:
            return (span.start_ns, span.end_ns, sequence(span), arrival.get(span.span_id, 0))

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
