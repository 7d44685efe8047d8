"""Run traces in Redis: per (role, config, arm) in arrival order, with running aggregates.

Keys (the role is the Redis Cluster hash tag in every one, so one ingest script
touches a single slot)::

    rolegate:{role}:traces:{config}:{arm}          stream: fields t (trace JSON), v (verdict)
    rolegate:{role}:window:{config}:{arm}:{epoch}  hash: the WindowStats fields (HINCRBY)
    rolegate:{role}:window:...:{epoch}:by:{name}   hash: the same, of one reporter's traces
    rolegate:{role}:window:...:{epoch}:closed      hash: cells of closed buckets moved out
                                                   of the window (`window_closed`)
    rolegate:{role}:reporters:{config}:{arm}:{epoch}  set: reporters with a window
    rolegate:{role}:pending:{config}:{arm}:{epoch} list: increments not yet in the window
    rolegate:{role}:claims:{run_id}                hash: reporter -> where its run is stored
    rolegate:{role}:tools:{config}                 hash: all-time tool tally, plus n
    rolegate:{role}:configs                        set: configs that reported traces

The stream is capped with ``MAXLEN ~ retention`` (Redis trims whole macro nodes,
so it may hold up to ~100 entries more). Its ids are arrival times in ms, so a
reader can ask for "everything since T".

The gate's window is "the traces since the current stage began": the epoch is
the binding's `stage_since`, so each stage gets its own aggregate and the gate
reads one hash instead of rescanning traces. Ingest appends a trace's increments
to the pending list and folds them into the window hashes in batches; a read
adds what is still pending (`gatekeeper.store.window_fold`). Aggregates are not
trimmed with the stream; they expire `window_ttl_s` after their last trace.

Storing goes through one Lua script per (role, config, arm, epoch) group:
idempotent on run ids, and written only while the role's binding is at the
version the traces were checked against (`gatekeeper.store.trace_ingest`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.cluster import RedisCluster

from bindings.connection import Connection
from bindings.errors import Conflict, InvalidInput, NotFound
from bindings.redis_errors import partly_applied, write_errors
from bindings.store import _redis_errors, load_stored
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.store.ingest_quota import After
from gatekeeper.store.kept import KeptConnections
from gatekeeper.store.trace_ingest import (
    INGEST_SCRIPT,
    Charge,
    Checked,
    IngestGroup,
    Moved,
    OverQuota,
    Stored,
)
from gatekeeper.store.trace_keys import (
    Location,
    claims_key,
    configs_key,
    legacy_run_key,
    stream_id_time,
    stream_key,
    tally_key,
)
from gatekeeper.store.window_closed import MOVE_SCRIPT
from gatekeeper.store.window_fold import READ_SCRIPT
from gatekeeper.store.window_reads import WindowReads
from gatekeeper.window import TOOL
from rolegate.trace import Trace

#: Checked, Charge, Stored, Moved and OverQuota are what callers of `TraceStore.add` pass and get back.
__all__ = [
    "DEFAULT_RETENTION",
    "RUN_TTL_S",
    "WINDOW_TTL_S",
    "Charge",
    "Checked",
    "Moved",
    "OverQuota",
    "Stored",
    "StoredTrace",
    "StreamEntries",
    "TraceStore",
]

DEFAULT_RETENTION = 100_000
#: How long a run id stays known: the window in which a retry is recognised.
RUN_TTL_S = 7 * 24 * 3600
#: How long a stage's aggregate outlives its last trace.
WINDOW_TTL_S = 30 * 24 * 3600
#: Script calls per group before giving up on run ids that keep appearing.
_ATTEMPTS = 4
#: Traces one ingest script stores at most. A script blocks Redis while it runs
#: (about 25-40 us a trace here): 10,000 in one call held every other client,
#: resolves' refreshes included, for 190-380 ms; 200 keep each call near 5-10 ms.
#: The chunks of a batch still go in one pipelined round trip.
MAX_TRACES_PER_SCRIPT = 200


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


class TraceStore(WindowReads):
    """Stores traces idempotently with running aggregates; reads them back."""

    def __init__(self, connection: Connection, *, retention: int = DEFAULT_RETENTION,
                 run_ttl_s: int = RUN_TTL_S, window_ttl_s: int = WINDOW_TTL_S,
                 before_command: Callable[[], None] | None = None) -> None:
        """`before_command` runs before each single-call round trip (a circuit breaker)."""
        self.connection = connection
        self.retention = retention
        self.run_ttl_s = run_ttl_s
        self.window_ttl_s = window_ttl_s
        self._ingest = connection.register_script(INGEST_SCRIPT)
        self._read = connection.register_script(READ_SCRIPT)
        self._move = connection.register_script(MOVE_SCRIPT)
        self._reporters_seen = {}
        self._closed_cells = {}
        #: The single-call path's connections (none for a Cluster client: no one pool).
        self._kept = None if isinstance(connection, RedisCluster) else KeptConnections(
            connection.connection_pool, before_command)

    # -- writes --------------------------------------------------------------

    @property
    def takes_charge(self) -> bool:
        """Whether `add` can count a quota charge in its script (not on a Redis Cluster)."""
        return not isinstance(self.connection, RedisCluster)

    def add(self, items: Sequence[Checked],
            charge: Charge | None = None) -> list[Stored | Moved]:
        """Store checked traces; the result lines up with `items`.

        All groups go in one pipelined round trip; each group (of at most
        MAX_TRACES_PER_SCRIPT traces) is one atomic script. Known run ids cost a
        second round trip for their group. A group checked against a binding
        version that is no longer current is written nowhere and answered
        `Moved` (only items with a `version` can be).

        `charge` (on a standalone Redis) is counted against the token's quota in
        the same round trip, by the first script before anything else: OverQuota,
        with nothing stored by any of the request's scripts, when it goes over a
        limit (`gatekeeper.store.ingest_quota`).
        """
        groups: dict[tuple[str, str, str, str, int | None, str | None, int], IngestGroup] = {}
        sizes: dict[tuple[str, str, str, str, int | None, str | None], int] = {}
        for index, item in enumerate(items):
            t = item.trace
            if t.tools and "\n" in "".join(t.tools):
                # The script reads increments as "field\nvalue" lines.
                raise InvalidInput(f"tools of run {t.run_id!r}: a tool name must not contain "
                                   "a line break", run_id=t.run_id)
            key = (t.role, t.config, t.arm, item.epoch, item.version, t.reporter)
            size = sizes[key] = sizes.get(key, 0) + 1
            chunk = (*key, (size - 1) // MAX_TRACES_PER_SCRIPT)
            group = groups.get(chunk)
            if group is None:
                group = groups[chunk] = IngestGroup(*key)
            group.take(index, item)
        results: list[Stored | Moved | None] = [None] * len(items)
        pending = list(groups.values())
        if charge is not None and not self.takes_charge:
            raise ValueError("a quota charge rides on the ingest script on a standalone Redis")
        charged = charge = None if charge is None else charge.for_calls(len(pending))
        for _ in range(_ATTEMPTS):
            # The first call counts the charge; each later one refuses if it was refused.
            charges: list[Charge | After | None] = [None] * len(pending)
            if charge is not None:
                charges = [charge, *[After(charge.marker)] * (len(pending) - 1)]
            with partly_applied(any(isinstance(r, Stored) for r in results)):
                answers = self._run([g.call(g.retention or self.retention, self.run_ttl_s,
                                            self.window_ttl_s, c)
                                     for g, c in zip(pending, charges)])
            charge = None  # counted once: a group sent again leaves it out
            retry = []
            for group, answer in zip(pending, answers):
                flags = [_text(a) for a in answer]
                if flags[0] == "Q" and charged is not None:
                    raise OverQuota(flags[1], int(flags[2]), charged.traces_limit
                                    if flags[1] == "traces" else charged.bytes_limit)
                if flags[0] == "V":
                    group.moved(items, int(flags[1]) if flags[1] else None, results)
                    continue
                if flags[0] == "R":
                    group.expect_known = [f == "1" for f in flags[1:]]
                    retry.append(group)
                    continue
                group.resolve(items, flags[1:], results)
            if not retry:
                return [r for r in results if r is not None]
            pending = retry
        raise Conflict("run ids kept changing under a concurrent ingest; retry the request")

    def _run(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        with write_errors():  # an answer that never came: 504, not 503
            try:
                return self._evalsha(calls)
            except redis.exceptions.NoScriptError:
                # The server lost its script cache (restart, SCRIPT FLUSH): load and
                # run again. Safe: a NOSCRIPT answer ran nothing.
                self._ingest.sha = self.connection.script_load(INGEST_SCRIPT)
                return self._evalsha(calls)

    def _evalsha(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # One round trip. redis-py's Script in a pipeline would first ask SCRIPT
        # EXISTS on every execute: a second round trip per ingest request.
        if len(calls) == 1:
            keys, args = calls[0]
            return [self._evalsha_one(keys, args)]
        if self._kept is not None:
            sha = self._ingest.sha
            return self._kept.pipeline([("EVALSHA", sha, len(keys), *keys, *args)
                                        for keys, args in calls])
        return self._pipelined(self._ingest.sha, calls)

    def _evalsha_one(self, keys: list[str], args: list[Any]) -> Any:
        # Straight on a kept connection: redis-py's command layer (its retry
        # wrapper, observability hooks, option filtering) cost about 45 us of
        # worker CPU per call under gunicorn (a PING endpoint: 591 vs 547 us per
        # request), and its pool's checkout poll as much again under gevent
        # (gatekeeper.store.kept); every single-trace POST paid both.
        # create_app's client retries nothing (retries=0), and a connection
        # whose command failed is dropped, as execute_command does. A Cluster
        # client has no one pool: it routes the command by its keys' slot.
        if self._kept is None:
            return self.connection.execute_command(  # type: ignore[no-untyped-call]
                "EVALSHA", self._ingest.sha, len(keys), *keys, *args)
        return self._kept.call("EVALSHA", self._ingest.sha, len(keys), *keys, *args)

    def read(self, role: str, config: str, arm: str, since: float | None = None,
             count: int | None = None, *, after: str | None = None,
             from_id: str | None = None) -> list[StoredTrace]:
        """Traces of (role, config, arm) in arrival order, with their verdicts.

        `since` (epoch seconds) starts at that arrival time; `after` (a stream id
        from an earlier read) starts just after it, for incremental readers, and
        `from_id` at it; `count` caps how many come back.
        """
        if from_id is not None:
            start = from_id
        elif after is not None:
            start = f"({after}"
        elif since is not None:
            start = f"{max(0, int(since * 1000))}-0"
        else:
            start = "-"
        with _redis_errors():
            entries = cast(StreamEntries, self.connection.xrange(
                stream_key(role, config, arm), min=start, max="+", count=count))
        return [_stored_trace(entry_id, fields) for entry_id, fields in entries]

    def newest(self, role: str, config: str, arm: str, count: int) -> list[StoredTrace]:
        """The newest `count` traces of (role, config, arm), oldest first."""
        with _redis_errors():
            entries = cast(StreamEntries, self.connection.xrevrange(
                stream_key(role, config, arm), count=count))
        return [_stored_trace(entry_id, fields) for entry_id, fields in reversed(entries)]

    def length(self, role: str, config: str, arm: str) -> int:
        """How many traces the (role, config, arm) stream holds now."""
        with _redis_errors():
            return int(self.connection.xlen(stream_key(role, config, arm)))

    def claims(self, role: str, run_id: str) -> dict[str, Location]:
        """Where each reporter's trace of a run id is stored, by reporter name ("" unstamped).

        More than one entry is a clash: several tokens sent traces under this run
        id. Empty when the run id is unknown (or its key expired). A run stored
        before claims were kept per reporter is read from its old key, under "".
        """
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hgetall(claims_key(role, run_id))
            pipe.get(legacy_run_key(role, run_id))
            raw, legacy = pipe.execute()
        found = {_text(name): Location.parse(_text(where)) for name, where in raw.items()}
        if not found and legacy is not None:
            found[""] = Location.parse(_text(legacy))
        return found

    def location(self, role: str, run_id: str, reporter: str | None = None) -> Location:
        """Where a run id is stored; NotFound if it is unknown (or its key expired).

        Of a run id several reporters sent: `reporter`'s trace when it sent one,
        else the one stored first.
        """
        found = self.claims(role, run_id)
        if not found:
            raise NotFound(f"no trace with run_id {run_id!r} for role {role!r}",
                           role=role, run_id=run_id)
        if reporter is not None and reporter in found:
            return found[reporter]
        return min(found.values(), key=lambda where: _stream_order(where.id))

    def lookup(self, role: str, run_id: str, reporter: str | None = None) -> StoredTrace:
        """The stored trace of a run id (see `location`); NotFound if unknown or trimmed away."""
        where = self.location(role, run_id, reporter)
        with _redis_errors():
            entries = cast(StreamEntries, self.connection.xrange(
                stream_key(role, where.config, where.arm), min=where.id, max=where.id))
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


#: What XRANGE answers: (stream id, {field: value}) per entry.
StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]


def _stored_trace(entry_id: bytes | str, fields: dict[bytes, bytes]) -> StoredTrace:
    ident = _text(entry_id)
    return StoredTrace(
        id=ident,
        time=stream_id_time(ident),
        trace=load_stored(Trace, fields[b"t"], f"stored trace {ident}"),
        verdict=TraceVerdict.from_json(json.loads(fields[b"v"])),
    )


def _stream_order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
