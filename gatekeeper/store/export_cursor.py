"""Where the OTLP exporter is in each role's trace streams, and what it dropped.

Keys::

    rolegate:{role}:export:otlp    hash: "<arm>/<config>" -> "<stream id> <n>": the last
                                   entry exported (or dropped) and how many entries of
                                   that stream were passed in all
    rolegate:export:otlp           hash: totals (exported, dropped:<reason>, retries,
                                   failures) and the last success and error

The exporter reads a stream after its cursor and moves the cursor only once the
collector took the batch (or refused it for good), so nothing stored is skipped
and a restart resumes where the last export ended. `n` against the stream's
`entries-added` is the lag, and tells runs trimmed away unexported (the stream
is capped at the role's retention) from runs exported.

One Lua call per role reads every stream's numbers (XINFO STREAM's, without the
entries it would also send) with the cursors, in that role's slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.store.trace_keys import configs_key, stream_id_time, stream_key

CURSOR_KEY_TEMPLATE = "rolegate:{{{role}}}:export:otlp"
STATS_KEY = "rolegate:export:otlp"
#: The trace arms, each its own stream.
ARMS = ("current", "candidate", "shadow")
START = "0-0"

# KEYS[1]: the role's cursor hash; KEYS[2..]: its streams. ARGV: the cursor field of each
# stream. Per stream: cursor, n, length, entries-added, first id, last id, the id of the
# first entry after the cursor ("" when none); then Redis's time (s, us) at the end.
_STATE = """
local out = {}
for i = 2, #KEYS do
  local raw = redis.call('HGET', KEYS[1], ARGV[i - 1])
  local cursor, n = '0-0', '0'
  if raw then cursor, n = string.match(raw, '^(%S+) (%d+)$') end
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local info = redis.call('XINFO', 'STREAM', KEYS[i])
    local f = {}
    for j = 1, #info, 2 do f[info[j]] = info[j + 1] end
    local first = f['first-entry'] and f['first-entry'][1] or ''
    local after = redis.call('XRANGE', KEYS[i], '(' .. cursor, '+', 'COUNT', 1)
    local next_id = after[1] and after[1][1] or ''
    table.insert(out, {cursor, n, tostring(f['length']), tostring(f['entries-added'] or -1),
                       first, f['last-generated-id'], next_id})
  else
    table.insert(out, {cursor, n, '0', '0', '', '0-0', ''})
  end
end
table.insert(out, redis.call('TIME'))
return out
"""

# KEYS[1]: the role's cursor hash. ARGV: field, expected value ("" for none), new value,
# repeated. Writes all or nothing: 0 when any cursor moved since it was read (another
# exporter took over), 1 when written.
_ADVANCE = """
for i = 1, #ARGV, 3 do
  local now = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  if now ~= ARGV[i + 1] then return 0 end
end
for i = 1, #ARGV, 3 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2]) end
return 1
"""


def cursor_key(role: str) -> str:
    """The hash of a role's export cursors."""
    return CURSOR_KEY_TEMPLATE.format(role=role)


def cursor_field(config: str, arm: str) -> str:
    """A stream's field in its role's cursor hash (a config id never holds '/')."""
    return f"{arm}/{config}"


def id_order(stream_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(frozen=True)
class StreamState:
    """One (role, config, arm) stream as the exporter sees it."""

    role: str
    config: str
    arm: str
    cursor: str
    #: Entries of the stream passed (exported or dropped) since the cursor began.
    passed: int
    length: int
    #: Entries ever added to the stream (-1 where Redis does not say: before 7.0).
    added: int
    first_id: str
    last_id: str
    #: The oldest entry not yet passed, "" when none is left.
    next_id: str

    @property
    def raw_cursor(self) -> str:
        """The stored cursor value ("" when none was stored yet)."""
        return "" if self.cursor == START and self.passed == 0 else f"{self.cursor} {self.passed}"

    @property
    def pending(self) -> bool:
        """Whether entries after the cursor are waiting."""
        return bool(self.next_id)

    @property
    def lag(self) -> int:
        """Stored runs not yet exported (those trimmed away unexported excluded)."""
        if not self.next_id:
            return 0
        if self.added < 0:
            return self.length  # Redis before 7.0 does not count what was added: at most this
        return max(0, min(self.added - self.passed, self.length))

    @property
    def trimmed(self) -> int:
        """Entries trimmed from the stream before they were exported: drops to count."""
        if self.added < 0 or not self.first_id or id_order(self.first_id) <= id_order(self.cursor):
            return 0
        # Every entry present is after the cursor: whatever else was added and not passed is gone.
        return max(0, self.added - self.passed - self.length)


@dataclass(frozen=True)
class RoleState:
    """Every stream of one role, and Redis's clock when they were read."""

    streams: tuple[StreamState, ...]
    now: float

    def lag_seconds(self) -> float:
        """How long the oldest unexported run of the role has waited (0 when none)."""
        waiting = [stream_id_time(s.next_id) for s in self.streams if s.next_id]
        return max(0.0, self.now - min(waiting)) if waiting else 0.0


class ExportCursors:
    """Reads and moves the exporter's cursors; keeps its totals."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._state = connection.register_script(_STATE)
        self._advance = connection.register_script(_ADVANCE)

    def role_state(self, role: str) -> RoleState:
        """Every stream of `role` (one per config that reported and arm) with its cursor."""
        with _redis_errors():
            configs = sorted(_text(c) for c in self.connection.smembers(configs_key(role)))
            pairs = [(config, arm) for config in configs for arm in ARMS]
            keys = [cursor_key(role)] + [stream_key(role, c, a) for c, a in pairs]
            answer = self._state(keys=keys, args=[cursor_field(c, a) for c, a in pairs])
        rows, clock = answer[:-1], answer[-1]
        streams = tuple(
            StreamState(role=role, config=config, arm=arm, cursor=_text(row[0]),
                        passed=int(row[1]), length=int(row[2]), added=int(row[3]),
                        first_id=_text(row[4]), last_id=_text(row[5]), next_id=_text(row[6]))
            for (config, arm), row in zip(pairs, rows))
        return RoleState(streams=streams, now=int(clock[0]) + int(clock[1]) / 1e6)

    def read(self, wanted: Sequence[tuple[StreamState, int]]) -> list[list[tuple[str, dict[bytes, bytes]]]]:
        """Up to `count` entries after each stream's cursor, oldest first, in one round trip."""
        if not wanted:
            return []
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for state, count in wanted:
                pipe.xrange(stream_key(state.role, state.config, state.arm),
                            min=f"({state.cursor}", max="+", count=count)
            answers = pipe.execute()
        return [[(_text(ident), fields) for ident, fields in cast(list[Any], entries)]
                for entries in answers]

    def advance(self, role: str, moves: Iterable[tuple[StreamState, str, int]]) -> bool:
        """Move streams' cursors of `role` to (new id, entries passed there); all or none.

        False when a cursor moved since it was read: another exporter holds the
        lease now and the batch just sent may arrive twice (at least once, never lost).
        """
        args: list[str] = []
        for state, new_id, passed in moves:
            args += [cursor_field(state.config, state.arm), state.raw_cursor,
                     f"{new_id} {state.passed + passed}"]
        if not args:
            return True
        with _redis_errors():
            return bool(self._advance(keys=[cursor_key(role)], args=args))

    def count(self, totals: Mapping[str, int], **marks: str | float) -> None:
        """Add to the totals (exported, dropped:<reason>, retries, ...) and set marks."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for name, n in totals.items():
                if n:
                    pipe.hincrby(STATS_KEY, name, n)
            if marks:
                pipe.hset(STATS_KEY, mapping={k: str(v) for k, v in marks.items()})
            pipe.execute()

    def totals(self) -> dict[str, str]:
        """The exporter's totals and marks, as stored."""
        with _redis_errors():
            raw = self.connection.hgetall(STATS_KEY)
        return {_text(k): _text(v) for k, v in raw.items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
