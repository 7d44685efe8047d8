"""Run traces in Redis: per (role, config, arm) in arrival order, with running aggregates.

Keys (the role is the Redis Cluster hash tag in every one, so one ingest script
touches a single slot)::

    rolegate:{role}:traces:{config}:{arm}          stream: fields t (trace JSON), v (verdict)
    rolegate:{role}:window:{config}:{arm}:{epoch}  hash: the WindowStats fields (HINCRBY)
    rolegate:{role}:run:{run_id}                   string: where the run is stored (JSON)
    rolegate:{role}:tools:{config}                 hash: all-time tool tally, plus n
    rolegate:{role}:configs                        set: configs that reported traces

The stream is capped with ``MAXLEN ~ retention`` (Redis trims whole macro nodes,
so it may hold up to ~100 entries more). Its ids are arrival times in ms, so a
reader can ask for "everything since T".

The gate's window is "the traces since the current stage began": the epoch is
the binding's `stage_since` as the ingesting worker saw it, so each stage gets
its own aggregate and the gate reads one hash instead of rescanning traces.
Aggregates are not trimmed with the stream; they expire `window_ttl_s` after
their last trace.

One Lua call per (role, config, arm, epoch) group stores a whole batch: each
trace whose run-id key is absent is appended and its key set; the group's
summed increments, minus those of duplicates, go into the aggregate. A client
retrying a run id therefore never counts twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bindings.errors import NotFound, StoreUnavailable
from bindings.models import Binding
from gatekeeper.invariants import TraceVerdict
from gatekeeper.trace import Trace
from gatekeeper.window import TOOL, WindowStats, increments

STREAM_KEY_TEMPLATE = "rolegate:{{{role}}}:traces:{config}:{arm}"
WINDOW_KEY_TEMPLATE = "rolegate:{{{role}}}:window:{config}:{arm}:{epoch}"
RUN_KEY_TEMPLATE = "rolegate:{{{role}}}:run:{run_id}"
TALLY_KEY_TEMPLATE = "rolegate:{{{role}}}:tools:{config}"
CONFIGS_KEY_TEMPLATE = "rolegate:{{{role}}}:configs"

DEFAULT_RETENTION = 100_000
#: How long a run id stays known: the window in which a retry is recognised.
RUN_TTL_S = 7 * 24 * 3600
#: How long a stage's aggregate outlives its last trace.
WINDOW_TTL_S = 30 * 24 * 3600

# KEYS: stream, window hash, tally hash, configs set, then one run-id key per trace
# ARGV: maxlen, run ttl, window ttl, location prefix, config, n traces, n total fields,
#       (field, value) * n fields  -- the group's summed increments
#       (trace JSON, verdict JSON, "field\nvalue\n..." increments) * n traces
# Returns per trace "N<location>" when stored, "D<location>" when already known.
_INGEST = """
local n = tonumber(ARGV[6])
local f = tonumber(ARGV[7])
local totals, order = {}, {}
for i = 0, f - 1 do
  local name = ARGV[8 + 2 * i]
  totals[name] = tonumber(ARGV[9 + 2 * i])
  order[i + 1] = name
end
local base = 8 + 2 * f
local out, added = {}, 0
for i = 0, n - 1 do
  local run_key = KEYS[5 + i]
  local at = base + 3 * i
  local known = redis.call('GET', run_key)
  if known then
    out[i + 1] = 'D' .. known
    for name, value in string.gmatch(ARGV[at + 2], '([^\\n]+)\\n(%-?%d+)') do
      totals[name] = totals[name] - tonumber(value)
    end
  else
    local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
                          't', ARGV[at], 'v', ARGV[at + 1])
    local location = ARGV[4] .. id .. '"}'
    redis.call('SET', run_key, location, 'EX', ARGV[2])
    out[i + 1] = 'N' .. location
    added = added + 1
  end
end
if added > 0 then
  for _, name in ipairs(order) do
    local value = totals[name]
    if value ~= 0 then
      redis.call('HINCRBY', KEYS[2], name, value)
      if name == 'n' or string.sub(name, 1, 5) == 'tool:' then
        redis.call('HINCRBY', KEYS[3], name, value)
      end
    end
  end
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  redis.call('SADD', KEYS[4], ARGV[5])
end
return out
"""


def stream_key(role: str, config: str, arm: str) -> str:
    """The stream holding one (role, config, arm)'s traces, oldest first."""
    return STREAM_KEY_TEMPLATE.format(role=role, config=config, arm=arm)


def window_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The running aggregate of one (role, config, arm) over one stage."""
    return WINDOW_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


def run_key(role: str, run_id: str) -> str:
    """Where a run id's location is kept (it makes ingest idempotent)."""
    return RUN_KEY_TEMPLATE.format(role=role, run_id=run_id)


def tally_key(role: str, config: str) -> str:
    """A config's all-time tool tally."""
    return TALLY_KEY_TEMPLATE.format(role=role, config=config)


def configs_key(role: str) -> str:
    """The set of configs that reported traces for a role."""
    return CONFIGS_KEY_TEMPLATE.format(role=role)


def epoch_of(binding: Binding | None) -> str:
    """The window epoch of a binding's current stage: its stage_since, fixed-format."""
    since = binding.stage_since if binding is not None else None
    return "0" if since is None else f"{since:.6f}"


def stream_id_time(stream_id: str) -> float:
    """The arrival time (epoch seconds) encoded in a stream id."""
    return int(stream_id.split("-", 1)[0]) / 1000


@dataclass(frozen=True)
class Location:
    """Where a run is stored: its (config, arm) stream, stream id and window epoch."""

    config: str
    arm: str
    epoch: str
    id: str

    @classmethod
    def parse(cls, raw: str) -> Location:
        """Read a location as the ingest script stored it."""
        data = json.loads(raw)
        return cls(config=data["config"], arm=data["arm"], epoch=data["epoch"], id=data["id"])


@dataclass(frozen=True)
class Stored:
    """The outcome of storing one trace: new or a duplicate of a known run id."""

    run_id: str
    duplicate: bool
    location: Location


@dataclass(frozen=True)
class StoredTrace:
    """A trace read back with its verdict, stream id and arrival time."""

    id: str
    time: float
    trace: Trace
    verdict: TraceVerdict

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"id": self.id, "received": self.time,
                "trace": self.trace.model_dump(mode="json"), "verdict": self.verdict.to_json()}


@dataclass(frozen=True)
class Checked:
    """A validated trace ready to store: its verdict and the window epoch it counts in."""

    trace: Trace
    verdict: TraceVerdict
    epoch: str


class TraceStore:
    """Stores traces idempotently with running aggregates; reads them back."""

    def __init__(self, connection: redis.Redis, *, retention: int = DEFAULT_RETENTION,
                 run_ttl_s: int = RUN_TTL_S, window_ttl_s: int = WINDOW_TTL_S) -> None:
        self.connection = connection
        self.retention = retention
        self.run_ttl_s = run_ttl_s
        self.window_ttl_s = window_ttl_s
        self._ingest = connection.register_script(_INGEST)

    # -- writes --------------------------------------------------------------

    def add(self, items: Sequence[Checked]) -> list[Stored]:
        """Store checked traces; the result lines up with `items`.

        All groups go in one pipelined round trip; each group is one atomic script.
        """
        groups: dict[tuple[str, str, str, str], list[int]] = {}
        for index, item in enumerate(items):
            t = item.trace
            groups.setdefault((t.role, t.config, t.arm, item.epoch), []).append(index)
        results: list[Stored | None] = [None] * len(items)
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for (role, config, arm, epoch), indices in groups.items():
                keys, args = self._group_call(role, config, arm, epoch,
                                              [items[i] for i in indices])
                self._ingest(keys=keys, args=args, client=pipe)
            answers = pipe.execute()
        for indices, answer in zip(groups.values(), answers):
            for index, raw in zip(indices, answer):
                text = raw.decode() if isinstance(raw, bytes) else raw
                results[index] = Stored(run_id=items[index].trace.run_id,
                                        duplicate=text[0] == "D",
                                        location=Location.parse(text[1:]))
        return [r for r in results if r is not None]

    def _group_call(self, role: str, config: str, arm: str, epoch: str,
                    items: Sequence[Checked]) -> tuple[list[str], list[Any]]:
        per_trace: list[dict[str, int]] = [increments(i.trace, i.verdict) for i in items]
        totals: dict[str, int] = {}
        for inc in per_trace:
            for name, value in inc.items():
                totals[name] = totals.get(name, 0) + value
        prefix = json.dumps({"config": config, "arm": arm, "epoch": epoch})[:-1] + ', "id": "'
        keys = [stream_key(role, config, arm), window_key(role, config, arm, epoch),
                tally_key(role, config), configs_key(role)]
        keys += [run_key(role, i.trace.run_id) for i in items]
        args: list[Any] = [self.retention, self.run_ttl_s, self.window_ttl_s, prefix, config,
                           len(items), len(totals)]
        for name, value in totals.items():
            args += (name, value)
        for item, inc in zip(items, per_trace):
            args += (
                item.trace.model_dump_json(exclude_none=True),
                json.dumps(item.verdict.to_json(), separators=(",", ":")),
                "".join(f"{name}\n{value}\n" for name, value in inc.items()),
            )
        return keys, args

    # -- reads ---------------------------------------------------------------

    def window(self, role: str, config: str, arm: str, epoch: str) -> WindowStats:
        """The running aggregate of one (role, config, arm) over one stage."""
        return self.windows(role, [(config, arm)], epoch)[0]

    def windows(self, role: str, pairs: Iterable[tuple[str, str]],
                epoch: str) -> list[WindowStats]:
        """Several (config, arm) aggregates over one stage, in one round trip."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for config, arm in pairs:
                pipe.hgetall(window_key(role, config, arm, epoch))
            raws = pipe.execute()
        return [WindowStats.from_fields(raw) for raw in raws]

    def read(self, role: str, config: str, arm: str, since: float | None = None,
             count: int | None = None, *, after: str | None = None) -> list[StoredTrace]:
        """Traces of (role, config, arm) in arrival order, with their verdicts.

        `since` (epoch seconds) starts at that arrival time; `after` (a stream id
        from an earlier read) starts just after it, for incremental readers;
        `count` caps how many come back.
        """
        if after is not None:
            start = f"({after}"
        elif since is not None:
            start = f"{max(0, int(since * 1000))}-0"
        else:
            start = "-"
        with _redis_errors():
            entries = self.connection.xrange(stream_key(role, config, arm), min=start,
                                             max="+", count=count)
        return [_stored_trace(entry_id, fields) for entry_id, fields in entries]

    def length(self, role: str, config: str, arm: str) -> int:
        """How many traces the (role, config, arm) stream holds now."""
        with _redis_errors():
            return int(self.connection.xlen(stream_key(role, config, arm)))

    def location(self, role: str, run_id: str) -> Location:
        """Where a run id is stored; NotFound if it is unknown (or its key expired)."""
        with _redis_errors():
            raw = self.connection.get(run_key(role, run_id))
        if raw is None:
            raise NotFound(f"no trace with run_id {run_id!r} for role {role!r}",
                           role=role, run_id=run_id)
        return Location.parse(raw.decode() if isinstance(raw, bytes) else raw)

    def lookup(self, role: str, run_id: str) -> StoredTrace:
        """The stored trace of a run id; NotFound if unknown or already trimmed away."""
        where = self.location(role, run_id)
        with _redis_errors():
            entries = self.connection.xrange(stream_key(role, where.config, where.arm),
                                             min=where.id, max=where.id)
        if not entries:
            raise NotFound(f"trace {run_id!r} of role {role!r} is past the retention",
                           role=role, run_id=run_id)
        entry_id, fields = entries[0]
        return _stored_trace(entry_id, fields)

    def tally(self, role: str) -> dict[str, dict[str, Any]]:
        """{config: {"runs": n, "tools": {tool: calls}}} over everything each config reported."""
        with _redis_errors():
            configs = sorted(_text(c) for c in self.connection.smembers(configs_key(role)))
            pipe = self.connection.pipeline(transaction=False)
            for config in configs:
                pipe.hgetall(tally_key(role, config))
            raws = pipe.execute() if configs else []
        out: dict[str, dict[str, Any]] = {}
        for config, raw in zip(configs, raws):
            fields = {_text(k): int(v) for k, v in raw.items()}
            tools = {k[len(TOOL):]: v for k, v in fields.items() if k.startswith(TOOL)}
            out[config] = {"runs": fields.get("n", 0),
                           "tools": dict(sorted(tools.items(), key=lambda kv: (-kv[1], kv[0])))}
        return out


def _stored_trace(entry_id: bytes | str, fields: dict[bytes, bytes]) -> StoredTrace:
    ident = _text(entry_id)
    return StoredTrace(
        id=ident,
        time=stream_id_time(ident),
        trace=Trace.model_validate_json(fields[b"t"]),
        verdict=TraceVerdict.from_json(json.loads(fields[b"v"])),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class _redis_errors:
    """Turn redis-py connection failures into StoreUnavailable (a 503, not a 500)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            raise StoreUnavailable(f"Redis did not answer: {exc}") from exc
