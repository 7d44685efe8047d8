"""Runs matched to their own reports: each assignment's run id waits until its trace lands.

Every resolve mints a run id (`rolegate.run_ids`) and counts the assignment
under it. Per (role, config, arm, stage epoch, reporter) two keys sit beside
that reporter's window, in the role's slot (the ingest script derives them
from the window key it already holds)::

    rolegate:{role}:window:{config}:{arm}:{epoch}:runs:{reporter}     zset: pending run
        ids, scored by assignment time
    rolegate:{role}:window:{config}:{arm}:{epoch}:runs:{reporter}:n   hash: "i:<bucket>"
        runs assigned with an id, "s:<bucket>" pending runs settled as missing

**Writes.** `add_runs` (POST /v1/exposures for an SDK's ranges, and each router
worker's flush of its own resolves) adds a range of ids in one script: an id
whose trace its reporter already stored (the claims hash names the reporter:
the report beat the exposure flush) is not added, so a fast run is matched
either way round. The ingest script removes a stored trace's id from its own
reporter's set in the same atomic step that stores it (`MATCH_LUA`), so a
report acknowledged is matched, and a replay (answered duplicate) removes
nothing twice. A token removes only its own ids: another token's trace under
the same id is its own run, and its set never held the id.

**Memory.** About 130 bytes of Redis per run in flight (the id, ~30 bytes, in a
sorted set: 100,000 pending ids held 12.4 MB). Ids still pending ten graces and ten minutes after their
assignment (`SETTLE_GRACES`, `SETTLE_MARGIN_S`: half an hour by default) are
settled: moved out of the set into the per-bucket count "s:<bucket>" (missing
for good: a report after that is not matched), and each set keeps at most
`MAX_PENDING` ids (the oldest settled first), so a candidate losing every run
costs counts, not ids. Both keys live the window's TTL (`traces.WINDOW_TTL_S`)
past their last write.

**Reads** (`read_matches`): per reporter, the ids assigned per bucket, the
pending ids of buckets past the grace (missing, settled ones included), the
runs still in flight and the bucket of the oldest: a view reads a few keys per
reporter, never a run per report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.stats.matching import RunIds
from gatekeeper.store.trace_keys import claims_key, window_key
from rolegate.exposures import BUCKET_S

#: A pending id is settled as missing SETTLE_GRACES of the role's grace and
#: SETTLE_MARGIN_S after its assignment: past the longest the reports section waits
#: for an arm whose reports come late (`view.reports.report_wait`, SILENT_GRACES).
SETTLE_GRACES = 10
SETTLE_MARGIN_S = 600.0
#: Most ids one (arm, reporter, epoch) set holds: the oldest beyond are settled.
MAX_PENDING = 500_000
#: Ids one script call adds at most (a longer range is several calls, one round trip).
CHUNK = 5_000
#: Ids settled per call at most (the rest in the next add).
SETTLE_PER_CALL = 2_000

#: The ingest script's part (`gatekeeper.store.trace_ingest`): called once per newly
#: stored trace with the window key, the reporter and the trace's claims key, whose tail
#: is the run id; only a minted id (`rolegate.run_ids.MINTED`) is looked for.
MATCH_LUA = """
local function match_run(window, reporter, claims)
  local id = string.match(claims, '}:claims:(r1%.%x+%.%d+)$')
  if id then redis.call('ZREM', window .. ':runs:' .. reporter, id) end
end
"""

# KEYS: pending set, counts hash
# ARGV: stem, from, to, score (assignment time), bucket, ttl, reporter, claims key
#       prefix, settle ids scored before this, bucket seconds, max pending, settle cap
ADD_SCRIPT = """
local runs, counts = KEYS[1], KEYS[2]
local stem, first, last = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local reporter, prefix = ARGV[7], ARGV[8]
-- One ZADD per 500 ids (a call per id cost as much again as the work).
local batch, score = {}, ARGV[4]
for i = first, last - 1 do
  local id = stem .. string.format('%d', i)
  if redis.call('HEXISTS', prefix .. id, reporter) == 0 then
    batch[#batch + 1] = score
    batch[#batch + 1] = id
    if #batch >= 1000 then
      redis.call('ZADD', runs, 'NX', unpack(batch))
      batch = {}
    end
  end
end
if #batch > 0 then redis.call('ZADD', runs, 'NX', unpack(batch)) end
redis.call('HINCRBY', counts, 'i:' .. ARGV[5], last - first)
local width, cap = tonumber(ARGV[10]), tonumber(ARGV[12])
local function settle(entries)
  for j = 1, #entries, 2 do
    local b = math.floor(tonumber(entries[j + 1]) / width)
    redis.call('HINCRBY', counts, 's:' .. string.format('%d', b), 1)
    redis.call('ZREM', runs, entries[j])
  end
end
settle(redis.call('ZRANGEBYSCORE', runs, '-inf', '(' .. ARGV[9], 'WITHSCORES',
                  'LIMIT', 0, cap))
local over = redis.call('ZCARD', runs) - tonumber(ARGV[11])
if over > 0 then settle(redis.call('ZRANGE', runs, 0, math.min(over, cap) - 1, 'WITHSCORES')) end
redis.call('EXPIRE', runs, ARGV[6])
redis.call('EXPIRE', counts, ARGV[6])
return 1
"""
ADD_SHA = hashlib.sha1(ADD_SCRIPT.encode()).hexdigest()


def runs_key(role: str, config: str, arm: str, epoch: str, reporter: str) -> str:
    """The pending run ids of one reporter's assignments of (role, config, arm) in a stage."""
    return f"{window_key(role, config, arm, epoch)}:runs:{reporter}"


def counts_key(role: str, config: str, arm: str, epoch: str, reporter: str) -> str:
    """Its counts: ids assigned ("i:<bucket>") and settled as missing ("s:<bucket>")."""
    return runs_key(role, config, arm, epoch, reporter) + ":n"


@dataclass(frozen=True)
class RunRange:
    """Ids ``stem + str(n)`` for n in [start, stop) of (role, config, arm, epoch), assigned
    in time `bucket` at about `at`, counted by `reporter`; `grace_s` is the role's."""

    role: str
    config: str
    arm: str
    epoch: str
    reporter: str
    stem: str
    start: int
    stop: int
    bucket: int
    at: float
    grace_s: float


class RunMatchStore:
    """Adds assigned run ids and reads what is still unmatched."""

    def __init__(self, connection: Connection, ttl_s: int) -> None:
        """`ttl_s`: how long the keys live past their last write (the window's,
        `traces.WINDOW_TTL_S`; not imported here: the ingest script imports this module)."""
        self.connection = connection
        self.ttl_s = ttl_s

    def add(self, ranges: Iterable[RunRange]) -> int:
        """Add each range's ids (one pipelined round trip); answers how many ids."""
        calls: list[tuple[list[str], list[object]]] = []
        for r in ranges:
            prefix = claims_key(r.role, "")
            settle = f"{r.at - SETTLE_GRACES * r.grace_s - SETTLE_MARGIN_S:.6f}"
            keys = [runs_key(r.role, r.config, r.arm, r.epoch, r.reporter),
                    counts_key(r.role, r.config, r.arm, r.epoch, r.reporter)]
            for start in range(r.start, r.stop, CHUNK):
                calls.append((keys, [r.stem, start, min(r.stop, start + CHUNK), f"{r.at:.3f}",
                                     r.bucket, self.ttl_s, r.reporter, prefix, settle,
                                     BUCKET_S, MAX_PENDING, SETTLE_PER_CALL]))
        if not calls:
            return 0
        with _redis_errors():
            try:
                self._evalsha(calls)
            except redis.exceptions.NoScriptError:
                # The server lost its script cache (restart, SCRIPT FLUSH): a NOSCRIPT ran
                # nothing, so load and send again.
                self.connection.script_load(ADD_SCRIPT)
                self._evalsha(calls)
        return sum(int(str(args[2])) - int(str(args[1])) for _, args in calls)

    def _evalsha(self, calls: list[tuple[list[str], list[object]]]) -> None:
        # Plain EVALSHA in a pipeline (a Script object would ask SCRIPT EXISTS each time,
        # and a cluster pipeline routes EVALSHA by its keys' slot like any command).
        pipe = self.connection.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(ADD_SHA, len(keys), *keys, *args)  # type: ignore[arg-type]
        pipe.execute()

    def read(self, role: str, config: str, arm: str, epoch: str, reporters: Iterable[str],
             mature_at: float) -> dict[str, RunIds]:
        """Each reporter's `RunIds` (reporters with no ids are left out); runs assigned
        before `mature_at` (the grace's edge) and unreported are missing.

        Two round trips, neither reading ids one by one: the counts, the oldest pending
        id and the runs in flight; then one ZCOUNT per bucket past the grace that had
        ids, from the oldest pending one's on (a caller that reports under run ids of
        its own leaves every id pending until it settles: counted, never read whole).
        """
        names = sorted(set(reporters))
        edge = f"{mature_at:.6f}"
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for name in names:
                runs = runs_key(role, config, arm, epoch, name)
                pipe.hgetall(counts_key(role, config, arm, epoch, name))
                pipe.zrange(runs, 0, 0, withscores=True)
                pipe.zrangebyscore(runs, edge, "+inf", start=0, num=1, withscores=True)
                pipe.zcount(runs, edge, "+inf")
            answers = iter(pipe.execute())
        found: dict[str, tuple[dict[int, int], dict[int, int], list[int], int, int | None]] = {}
        for name in names:
            counts, oldest, in_flight, flying = (next(answers) for _ in range(4))
            ids: dict[int, int] = {}
            settled: dict[int, int] = {}
            for raw, value in counts.items():
                kind, _, bucket = (raw.decode() if isinstance(raw, bytes) else raw).partition(":")
                into = ids if kind == "i" else settled
                into[int(bucket)] = into.get(int(bucket), 0) + int(value)
            if not ids:
                continue
            first = int(oldest[0][1] // BUCKET_S) if oldest else None
            mature = int(mature_at // BUCKET_S)
            pending = sorted(b for b in ids if first is not None and first <= b < mature)
            found[name] = (ids, settled, pending, int(flying),
                           int(in_flight[0][1] // BUCKET_S) if in_flight else None)
        if any(pending for _, _, pending, _, _ in found.values()):
            with _redis_errors():
                pipe = self.connection.pipeline(transaction=False)
                for name, (_, _, pending, _, _) in found.items():
                    runs = runs_key(role, config, arm, epoch, name)
                    for b in pending:
                        pipe.zcount(runs, b * BUCKET_S, f"({(b + 1) * BUCKET_S}")
                counted = iter(pipe.execute())
        out: dict[str, RunIds] = {}
        for name, (ids, missing, pending, flying, first_in_flight) in found.items():
            for b in pending:
                n = int(next(counted))
                if n:
                    missing[b] = missing.get(b, 0) + n
            out[name] = RunIds(ids, missing, flying, first_in_flight)
        return out
