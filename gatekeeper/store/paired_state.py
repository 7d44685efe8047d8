"""The shadow pairing tally kept in Redis, advanced over the runs that arrived since the last read.

Keys (the role is the Redis Cluster hash tag, so one script saves them all)::

    rolegate:{role}:paired:{current}:{candidate}:{epoch}                 hash: the Tally
    rolegate:{role}:paired:{current}:{candidate}:{epoch}:waiting:{arm}   hash: key -> queue
    rolegate:{role}:paired:{current}:{candidate}:{epoch}:age:{arm}       zset: key -> ms

`epoch` is the shadow stage's window epoch (`gatekeeper.store.traces.epoch_of`): a new
stage starts a fresh tally under new keys; the old ones expire `ttl_s` after
their last save. The tally hash holds the counts, the trajectory histogram and
the capped key lists as JSON, `last_current` / `last_shadow` (the last stream
ids counted, "" before the first) and `dropped_current` / `dropped_shadow`.
`waiting:{arm}` holds, per job key, that arm's runs still waiting for a mate
as JSON `[[stream id, 1|0, [tools...]], ...]`; `age:{arm}` scores each waiting
key by the arrival (ms) of its oldest run.

Memory bound: each arm keeps at most `max_waiting` keys waiting (default
20,000; a few hundred bytes each). A save that goes over drops the keys that
have waited longest and counts them in `dropped_{arm}`: a run whose mate
arrives after that many newer unmatched keys of its arm is never paired. All
keys also expire `ttl_s` after the last save.

A read loads the tally, reads each arm's entries after its last id (XRANGE with
an exclusive start, at most `max_advance` per arm: a tally far behind catches
up over successive reads and says so), loads the waiting queues of the keys
those entries carry, folds them in (`gatekeeper.stats.pair_tally.advance`) and saves
with one script that first checks both last ids are still the ones read. When
another reader got there first nothing is written and that reader's tally is
shown instead, so two readers never count a run twice.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.checks.trajectory import Change
from gatekeeper.stats.pair_tally import (
    ARMS,
    CURRENT,
    SHADOW,
    Listed,
    Queue,
    Step,
    Tally,
    Waiting,
    advance,
    keys_of,
)
from gatekeeper.stats.pairing import Run
from gatekeeper.store.drift_state import run_of_fields
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import WINDOW_TTL_S

PAIRED_KEY_TEMPLATE = "rolegate:{{{role}}}:paired:{current}:{candidate}:{epoch}"
WAITING_KEY_TEMPLATE = PAIRED_KEY_TEMPLATE + ":waiting:{arm}"
AGE_KEY_TEMPLATE = PAIRED_KEY_TEMPLATE + ":age:{arm}"

#: Most stream entries read per arm per read: bounds a read.
MAX_ADVANCE = 5_000
#: Most keys one arm keeps waiting for a mate; the longest-waiting go first.
MAX_WAITING = 20_000
#: The tally outlives its last save as long as the stage's aggregate does.
PAIRED_TTL_S = WINDOW_TTL_S

# KEYS: tally, waiting current, waiting shadow, age current, age shadow
# ARGV: ttl, max waiting, reset ("1": start over), last_current and last_shadow read,
#       n tally items, the tally's field/value items, then per changed key:
#       key, arm it waited on before ("" none), arm it waits on now ("" none), queue, ms
# Returns {1, waiting current, waiting shadow, dropped current, dropped shadow} when
# written, {0} when a last id moved (then nothing is written).
_SAVE = """
local last_c = redis.call('HGET', KEYS[1], 'last_current') or ''
local last_s = redis.call('HGET', KEYS[1], 'last_shadow') or ''
if last_c ~= ARGV[4] or last_s ~= ARGV[5] then return {0} end
if ARGV[3] == '1' then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]) end
local waiting = {current = KEYS[2], shadow = KEYS[3]}
local age = {current = KEYS[4], shadow = KEYS[5]}
local n = tonumber(ARGV[6])
redis.call('HSET', KEYS[1], unpack(ARGV, 7, 6 + n))
for at = 7 + n, #ARGV, 5 do
  local key, was, now = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  if was ~= '' and was ~= now then
    redis.call('HDEL', waiting[was], key)
    redis.call('ZREM', age[was], key)
  end
  if now ~= '' then
    redis.call('HSET', waiting[now], key, ARGV[at + 3])
    redis.call('ZADD', age[now], ARGV[at + 4], key)
  end
end
local sizes = {1}
for i, arm in ipairs({'current', 'shadow'}) do
  local over = redis.call('ZCARD', age[arm]) - tonumber(ARGV[2])
  if over > 0 then
    local gone = redis.call('ZPOPMIN', age[arm], over)
    for g = 1, #gone, 2 do redis.call('HDEL', waiting[arm], gone[g]) end
    redis.call('HINCRBY', KEYS[1], 'dropped_' .. arm, over)
  end
  sizes[i + 1] = redis.call('HLEN', waiting[arm])
  sizes[i + 3] = tonumber(redis.call('HGET', KEYS[1], 'dropped_' .. arm) or '0')
end
for k = 1, 5 do redis.call('EXPIRE', KEYS[k], ARGV[1]) end
return sizes
"""


def _counted(fields: Mapping[bytes, bytes], trusted: frozenset[str] | None) -> Run:
    """The run of a stream entry; keyless (read past, never paired) when its reporter is untrusted."""
    run = run_of_fields(fields)
    if trusted is not None and json.loads(fields[b"t"]).get("reporter") not in trusted:
        return dataclasses.replace(run, key="")
    return run


@dataclass(frozen=True)
class Arms:
    """One shadow stage to pair: the role, its epoch, both configs and when it began."""

    role: str
    epoch: str
    current: str
    candidate: str
    since: float | None
    #: Reporters whose runs are paired (None: every reporter's). Another's runs are
    #: read past without pairing, so a forged run never counts toward promotion.
    trusted: frozenset[str] | None = None

    def tally_key(self) -> str:
        """The hash holding the stage's tally."""
        return PAIRED_KEY_TEMPLATE.format(role=self.role, current=self.current,
                                          candidate=self.candidate, epoch=self.epoch)

    def keys(self) -> list[str]:
        """The tally, waiting current, waiting shadow, age current and age shadow keys."""
        names = dict(role=self.role, current=self.current, candidate=self.candidate,
                     epoch=self.epoch)
        return [self.tally_key(),
                *(WAITING_KEY_TEMPLATE.format(**names, arm=arm) for arm in ARMS),
                *(AGE_KEY_TEMPLATE.format(**names, arm=arm) for arm in ARMS)]

    def stream(self, arm: str) -> str:
        """The trace stream of one arm."""
        return stream_key(self.role, self.current if arm == CURRENT else self.candidate, arm)


@dataclass(frozen=True)
class Paired:
    """A stage's tally after a read: whether it read all there was, what waits, what dropped."""

    tally: Tally
    caught_up: bool
    waiting: dict[str, int]
    dropped: dict[str, int]


class PairedStates:
    """Loads, advances and saves (compare-and-set) the pairing tally of a shadow stage."""

    def __init__(self, connection: Connection, *, max_advance: int = MAX_ADVANCE,
                 max_waiting: int = MAX_WAITING, ttl_s: int = PAIRED_TTL_S) -> None:
        self.connection = connection
        self.max_advance = max_advance
        self.max_waiting = max_waiting
        self.ttl_s = ttl_s
        self._save = connection.register_script(_SAVE)

    def load(self, arms: Arms) -> tuple[Tally | None, dict[str, int], dict[str, int]]:
        """The stored tally (None before the first save), waiting keys and dropped keys per arm."""
        keys = arms.keys()
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hgetall(keys[0])
            pipe.hlen(keys[1])
            pipe.hlen(keys[2])
            raw, waiting_c, waiting_s = pipe.execute()
        fields = {_text(k): _text(v) for k, v in raw.items()}
        dropped = {arm: int(fields.get(f"dropped_{arm}", 0)) for arm in ARMS}
        tally = tally_from_fields(fields) if "last_current" in fields else None
        return tally, {CURRENT: int(waiting_c), SHADOW: int(waiting_s)}, dropped

    def advance(self, arms: Arms, required: Sequence[str]) -> Paired:
        """The stage's tally advanced over the entries it has not counted yet.

        Four round trips: load, read both streams, load the touched keys' waiting
        runs, save. A stored tally judged against other required tools starts
        over from the stage's first entry.
        """
        stored, waiting, dropped = self.load(arms)
        wanted = tuple(sorted(set(required)))
        reset = stored is not None and stored.required != wanted
        start = stored if stored is not None and not reset else Tally(required=wanted)
        current, shadow = self._read(arms, start)
        caught_up = len(current) < self.max_advance and len(shadow) < self.max_advance
        if not current and not shadow:
            return Paired(start, caught_up, waiting, dropped)
        queues = {} if reset else self._queues(arms, keys_of(current, shadow))
        step = advance(start, queues, current, shadow)
        saved = self._store(arms, stored, step, reset)
        if saved is None:
            # Another reader saved first: show its tally, which counted the same runs.
            again, waiting, dropped = self.load(arms)
            return Paired(again or step.tally, caught_up, waiting, dropped)
        waiting, dropped = saved
        return Paired(step.tally, caught_up, waiting, dropped)

    def _read(self, arms: Arms, start: Tally) -> tuple[list[tuple[str, Run]], ...]:
        """Each arm's stream entries after the tally's last id of it, oldest first."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for arm in ARMS:
                last = start.last(arm)
                if last:
                    low = f"({last}"
                elif arms.since is None:
                    low = "-"
                else:
                    low = f"{max(0, int(arms.since * 1000))}-0"
                pipe.xrange(arms.stream(arm), min=low, max="+", count=self.max_advance)
            answers = pipe.execute()
        return tuple([(_text(entry_id), _counted(fields, arms.trusted))
                      for entry_id, fields in entries] for entries in answers)

    def _queues(self, arms: Arms, keys: set[str]) -> dict[str, Queue]:
        """The waiting runs of `keys` (one arm at most waits per key), one round trip."""
        if not keys:
            return {}
        ordered = sorted(keys)
        _, waiting_c, waiting_s, _, _ = arms.keys()
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hmget(waiting_c, ordered)
            pipe.hmget(waiting_s, ordered)
            from_current, from_shadow = pipe.execute()
        out: dict[str, Queue] = {}
        for key, raw_c, raw_s in zip(ordered, from_current, from_shadow):
            for arm, raw in ((CURRENT, raw_c), (SHADOW, raw_s)):
                if raw:
                    out[key] = queue_from_json(arm, raw)
        return out

    def _store(self, arms: Arms, stored: Tally | None, step: Step,
               reset: bool) -> tuple[dict[str, int], dict[str, int]] | None:
        """Save with a compare-and-set on the last ids read.

        Answers the keys waiting and dropped per arm, or None when another
        reader's save came first.
        """
        items = [x for pair in tally_fields(step.tally).items() for x in pair]
        args: list[Any] = [self.ttl_s, self.max_waiting, "1" if reset else "0",
                           stored.last_current if stored is not None else "",
                           stored.last_shadow if stored is not None else "", len(items), *items]
        for key, queue in step.changed.items():
            was = step.before.get(key)
            now = queue.arm if queue.runs else ""
            oldest = int(queue.runs[0].id.split("-", 1)[0]) if queue.runs else 0
            args += [key, was.arm if was is not None else "", now, queue_json(queue), oldest]
        keys = arms.keys()
        with _redis_errors():
            try:
                answer = self.connection.evalsha(self._save.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                # The server lost its script cache: a NOSCRIPT answer ran nothing.
                self._save.sha = self.connection.script_load(_SAVE)
                answer = self.connection.evalsha(self._save.sha, len(keys), *keys, *args)
        if int(answer[0]) != 1:
            return None
        return ({CURRENT: int(answer[1]), SHADOW: int(answer[2])},
                {CURRENT: int(answer[3]), SHADOW: int(answer[4])})


def tally_fields(tally: Tally) -> dict[str, str]:
    """A tally as its hash stores it (the lists as JSON [[id, key(, lost)], ...])."""
    return {
        "required": json.dumps(list(tally.required)), "pairs": str(tally.pairs),
        "both_pass": str(tally.both_pass), "both_fail": str(tally.both_fail),
        "regressions": str(tally.regressions), "improvements": str(tally.improvements),
        "trajectory": json.dumps(dict(tally.trajectory)),
        "regressed": json.dumps([[i.id, i.key] for i in tally.regressed]),
        "improved": json.dumps([[i.id, i.key] for i in tally.improved]),
        "blocking": json.dumps([[i.id, i.key, list(i.lost)] for i in tally.blocking]),
        "blocking_n": str(tally.blocking_n), "lost": json.dumps(list(tally.lost)),
        "last_current": tally.last_current, "last_shadow": tally.last_shadow,
    }


def tally_from_fields(fields: Mapping[str, str]) -> Tally:
    """Read a tally back from its hash (decoded HGETALL answer)."""
    stored = json.loads(fields["trajectory"])
    return Tally(
        required=tuple(json.loads(fields["required"])), pairs=int(fields["pairs"]),
        both_pass=int(fields["both_pass"]), both_fail=int(fields["both_fail"]),
        regressions=int(fields["regressions"]), improvements=int(fields["improvements"]),
        trajectory={c.value: int(stored.get(c.value, 0)) for c in Change},
        regressed=tuple(Listed(i, k) for i, k in json.loads(fields["regressed"])),
        improved=tuple(Listed(i, k) for i, k in json.loads(fields["improved"])),
        blocking=tuple(Listed(i, k, tuple(lost)) for i, k, lost in json.loads(fields["blocking"])),
        blocking_n=int(fields["blocking_n"]), lost=tuple(json.loads(fields["lost"])),
        last_current=fields["last_current"], last_shadow=fields["last_shadow"])


def queue_json(queue: Queue) -> str:
    """A key's waiting runs as its hash field stores them."""
    return json.dumps([[r.id, int(r.passed), list(r.tools)] for r in queue.runs],
                      separators=(",", ":"))


def queue_from_json(arm: str, raw: bytes | str) -> Queue:
    """Read a key's waiting runs of `arm` back."""
    return Queue(arm, tuple(Waiting(i, bool(p), tuple(tools)) for i, p, tools in json.loads(raw)))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
