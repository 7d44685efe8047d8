"""Spans of OTLP runs whose root span has not arrived yet, kept in Redis between export batches.

An exporter sends a run's spans as they end, in as many batches (and to as
many router workers) as it likes; the root span ends last. Until it arrives the
spans wait here, one hash per trace id (the trace id is the Redis Cluster hash
tag), keyed by span id so a retried export stores a span once::

    rolegate:otel:{<trace id>}:spans   hash: span id -> span JSON; "" -> placement JSON
    rolegate:otel:pending              sorted set: trace id scored by first-seen time

Bounded and expiring: a pending run holds at most `max_spans` spans (more are
refused), at most `max_runs` runs wait at once (a new one past that is refused),
and a run whose root never arrives is forgotten `ttl` seconds after its last span.
The run-count bound is read before the write, not in the same step, so a burst
of workers can pass it by a few runs; the per-run bound is exact. Each script and
transaction touches one run's hash (one hash slot under Redis Cluster); the
pending index is updated in separate calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bindings.connection import Connection
from bindings.redis_errors import write_errors
from bindings.store import _redis_errors
from rolegate.spans import Span

SPANS_KEY_TEMPLATE = "rolegate:otel:{{{trace_id}}}:spans"
PENDING_KEY = "rolegate:otel:pending"
#: The hash field holding the run's placement attributes (no span id is empty).
PLACEMENT_FIELD = ""
DEFAULT_TTL = 3600
DEFAULT_MAX_SPANS = 5000
DEFAULT_MAX_RUNS = 10_000

# KEYS[1]: the run's span hash. ARGV[1]: ttl seconds; ARGV[2]: max spans; ARGV[3]: placement
# JSON to merge ("" for none); ARGV[4..]: span id, span JSON pairs.
# Stores each span not over the bound (a span id already there is replaced, not counted
# twice), merges the placement, renews the expiry. Returns how many spans were refused.
ADD_SCRIPT = """
local refused = 0
local limit = tonumber(ARGV[2])
for i = 4, #ARGV, 2 do
  local held = redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], '')
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 or held < limit then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    refused = refused + 1
  end
end
if ARGV[3] ~= '' then
  local old = redis.call('HGET', KEYS[1], '')
  local merged = old and cjson.decode(old) or {}
  for name, value in pairs(cjson.decode(ARGV[3])) do
    if merged[name] == nil then merged[name] = value end
  end
  redis.call('HSET', KEYS[1], '', cjson.encode(merged))
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return refused
"""


def spans_key(trace_id: str) -> str:
    """The hash of one pending run's spans."""
    return SPANS_KEY_TEMPLATE.format(trace_id=trace_id)


@dataclass(frozen=True)
class Pending:
    """A run's spans taken out of the store, and the placement its spans named."""

    spans: list[Span]
    placement: dict[str, str]


class PendingSpans:
    """Keeps the spans of unfinished OTLP runs, bounded and expiring."""

    def __init__(self, connection: Connection, *, ttl: int = DEFAULT_TTL,
                 max_spans: int = DEFAULT_MAX_SPANS, max_runs: int = DEFAULT_MAX_RUNS) -> None:
        self.connection = connection
        self.ttl = ttl
        self.max_spans = max_spans
        self.max_runs = max_runs
        self._add = connection.register_script(ADD_SCRIPT)

    def add(self, trace_id: str, spans: Sequence[Span], placement: Mapping[str, str],
            now: float) -> int:
        """Keep `spans` (and merge `placement`) until the run's root arrives; the count refused."""
        key = spans_key(trace_id)
        # A send whose answer never came may have kept the spans: 504, not 503.
        with write_errors():
            if not self._admit(trace_id, now):
                return len(spans)
            args: list[str | int] = [self.ttl, self.max_spans,
                                     json.dumps(dict(placement)) if placement else ""]
            for span in spans:
                args += [span.span_id, json.dumps(span.to_json(), separators=(",", ":"))]
            refused: int = self._add(keys=[key], args=args)
        return refused

    def _admit(self, trace_id: str, now: float) -> bool:
        """Whether the run may wait here: already waiting, or under `max_runs` runs."""
        pipe = self.connection.pipeline(transaction=False)
        pipe.zremrangebyscore(PENDING_KEY, "-inf", now - self.ttl)
        pipe.zscore(PENDING_KEY, trace_id)
        pipe.zcard(PENDING_KEY)
        _, score, count = pipe.execute()
        if score is None and count >= self.max_runs:
            return False
        # Scored by the latest batch, so the sweep above forgets only runs the hash forgot.
        self.connection.zadd(PENDING_KEY, {trace_id: now})
        return True

    def placement(self, trace_id: str) -> dict[str, str]:
        """The placement attributes earlier spans of the run named (empty when none)."""
        with _redis_errors():
            raw = self.connection.hget(spans_key(trace_id), PLACEMENT_FIELD)
        return _placement(raw)

    def take(self, trace_id: str) -> Pending:
        """Remove and return the run's pending spans (its root arrived), in one step."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.hgetall(spans_key(trace_id))
            pipe.delete(spans_key(trace_id))
            stored, _ = pipe.execute()
            self.connection.zrem(PENDING_KEY, trace_id)
        placement = _placement(stored.pop(PLACEMENT_FIELD.encode(), None))
        spans = [Span.from_json(json.loads(raw)) for raw in stored.values()]
        return Pending(spans, placement)


def _placement(raw: bytes | str | None) -> dict[str, str]:
    if not raw:
        return {}
    loaded = json.loads(raw)
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
