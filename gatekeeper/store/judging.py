"""The online judges' Redis state: the queue of sampled runs, the day's spend, the verdicts.

Ingest only offers a sampled run here (one script call: budget check, bounded
push, counters); judging happens elsewhere (`gatekeeper.judging`) and reports
back. Every key carries the role as a Redis Cluster hash tag:

    rolegate:{role}:judge:queue          list of sampled runs waiting (JSON), bounded
    rolegate:{role}:judge:claimed        claim id -> "<yyyymmdd charged>|<item JSON>": runs
                                         handed out and not yet answered
    rolegate:{role}:judge:deadlines      sorted set: claim id by its deadline
    rolegate:{role}:judge:day:<yyyymmdd> the UTC day's counters: queued, skipped_full,
                                         skipped_budget, calls, tokens, judged, errors
    rolegate:{role}:judge:counts:<epoch> verdicts per "arm|key|pass" / "arm|key|fail"
                                         over a stage window
    rolegate:{role}:judge:verdicts       "<reporter>|<run_id>" -> the run's verdicts (JSON),
                                         and "*|<run_id>" -> the newest of them
    rolegate:{role}:judge:agreement      "<source>|<key>|agree" / "...|disagree": the judge
                                         against human feedback ("human") and itself ("self")

Judging is at-least-once, as rq's started-job registry keeps a job: a claim
moves a run from the queue into `claimed` with a deadline (the claimant's lease)
and charges it to the day's calls; a verdict is accepted only for a claim still
held, for the run, arm, config and epoch it was handed out with, and then
acknowledged (`release`). A claim whose verdict never came (a gatekeeper killed
mid-judgment) goes back to the head of the queue at the next claim after its
deadline, and its call is refunded to the day it was charged (`requeued` counts
them). A verdict landing while its claim expires may count twice; none is lost.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from bindings.connection import Connection
from bindings.store import _redis_errors

QUEUE_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:queue"
CLAIMED_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:claimed"
DEADLINES_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:deadlines"
DAY_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:day:{day}"
COUNTS_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:counts:{epoch}"
VERDICTS_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:verdicts"
AGREEMENT_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:agreement"
#: How long the day's counters, the counts and the verdicts outlive their last write.
DAY_TTL_S = 8 * 24 * 3600
VERDICT_TTL_S = 7 * 24 * 3600
#: Counter fields of a day, in the order the gate view shows them.
DAY_FIELDS = ("queued", "skipped_full", "skipped_budget", "calls", "tokens", "judged",
              "errors", "requeued")

# KEYS: queue, day. ARGV: item JSON, queue max, max calls, max tokens, ttl.
# Past the day's budget the run is skipped (budget), past the queue's bound it is
# skipped (full); otherwise queued. Returns the field counted.
OFFER_SCRIPT = """
local spent = redis.call('HMGET', KEYS[2], 'calls', 'tokens')
local field
if tonumber(spent[1] or '0') >= tonumber(ARGV[3])
   or tonumber(spent[2] or '0') >= tonumber(ARGV[4]) then
  field = 'skipped_budget'
elseif redis.call('LLEN', KEYS[1]) >= tonumber(ARGV[2]) then
  field = 'skipped_full'
else
  redis.call('RPUSH', KEYS[1], ARGV[1])
  field = 'queued'
end
redis.call('HINCRBY', KEYS[2], field, 1)
redis.call('EXPIRE', KEYS[2], ARGV[5])
return field
"""

# KEYS: queue, day, claimed, deadlines. ARGV: at most, max calls, max tokens, ttl, now,
# deadline, claim id base, day key prefix, today (yyyymmdd).
# First every claim past its deadline goes back to the queue's head, its call refunded to
# the day it was charged (that day's key is built here: it shares the role's hash tag).
# Then takes as many runs as the day's call budget still allows (each taken run is a
# call reserved), past the token budget none, each held under its claim id until its
# deadline. Returns {id, item, id, item, ...}.
CLAIM_SCRIPT = """
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[5])
for i = #expired, 1, -1 do
  local id = expired[i]
  local entry = redis.call('HGET', KEYS[3], id)
  if entry then
    local sep = string.find(entry, '|', 1, true)
    local charged = ARGV[8] .. string.sub(entry, 1, sep - 1)
    redis.call('LPUSH', KEYS[1], string.sub(entry, sep + 1))
    if redis.call('EXISTS', charged) == 1 then redis.call('HINCRBY', charged, 'calls', -1) end
    redis.call('HINCRBY', KEYS[2], 'requeued', 1)
    redis.call('EXPIRE', KEYS[2], ARGV[4])
    redis.call('HDEL', KEYS[3], id)
  end
  redis.call('ZREM', KEYS[4], id)
end
local out = {}
local spent = redis.call('HMGET', KEYS[2], 'calls', 'tokens')
local calls = tonumber(spent[1] or '0')
if tonumber(spent[2] or '0') >= tonumber(ARGV[3]) then return out end
local room = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - calls)
if room <= 0 then return out end
local items = redis.call('LPOP', KEYS[1], room)
if not items then return out end
for i, item in ipairs(items) do
  local id = ARGV[7] .. '-' .. i
  redis.call('HSET', KEYS[3], id, ARGV[9] .. '|' .. item)
  redis.call('ZADD', KEYS[4], ARGV[6], id)
  out[#out + 1] = id
  out[#out + 1] = item
end
redis.call('HINCRBY', KEYS[2], 'calls', #items)
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[4])
redis.call('EXPIRE', KEYS[4], ARGV[4])
return out
"""

# KEYS: claimed, deadlines. ARGV: refund (0/1), day key prefix, then claim ids.
# Drops each claim still held (a verdict came, or the run cannot be judged); with refund
# its call goes back to the day it was charged. Returns how many were held.
RELEASE_SCRIPT = """
local held = 0
for i = 3, #ARGV do
  local entry = redis.call('HGET', KEYS[1], ARGV[i])
  if entry then
    held = held + 1
    redis.call('HDEL', KEYS[1], ARGV[i])
    if ARGV[1] == '1' then
      local sep = string.find(entry, '|', 1, true)
      local charged = ARGV[2] .. string.sub(entry, 1, sep - 1)
      if redis.call('EXISTS', charged) == 1 then redis.call('HINCRBY', charged, 'calls', -1) end
    end
  end
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return held
"""


def human_agreement(tier: str, verdicts: Mapping[str, Mapping[str, Any]]) -> dict[str, bool]:
    """Per key, whether the judge agreed with a human's feedback tier on the run.

    A `positive` run is a pass on every criterion: the judge agrees on a key it
    passed. A `negative_corrected` run is wrong as a whole (the human wrote the
    right answer) without saying which criterion it broke: the judge agrees on
    the run, counted under the key "run", when it failed any key. Other tiers
    are not labels.
    """
    if tier == "positive":
        return {key: bool(v["pass"]) for key, v in verdicts.items()}
    if tier == "negative_corrected":
        return {"run": any(not v["pass"] for v in verdicts.values())}
    return {}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _day_prefix(role: str) -> str:
    """A day key without its day: the scripts add the day a claim was charged to."""
    return DAY_KEY_TEMPLATE.format(role=role, day="")


def day_of(now: float) -> str:
    """The UTC day `now` falls in, as yyyymmdd."""
    return time.strftime("%Y%m%d", time.gmtime(now))


class JudgeStore:
    """The queue, the day's counters and the verdicts of one router's judged roles."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._offer = connection.register_script(OFFER_SCRIPT)
        self._claim = connection.register_script(CLAIM_SCRIPT)
        self._release = connection.register_script(RELEASE_SCRIPT)

    def offer(self, role: str, item: Mapping[str, Any], *, queue_max: int, max_calls: int,
              max_tokens: int, now: float) -> str:
        """Queue a sampled run unless the budget is spent or the queue full; what was counted."""
        keys = [QUEUE_KEY_TEMPLATE.format(role=role),
                DAY_KEY_TEMPLATE.format(role=role, day=day_of(now))]
        with _redis_errors():
            field = self._offer(keys=keys, args=[json.dumps(item), queue_max, max_calls,
                                                 max_tokens, DAY_TTL_S])
        return field.decode() if isinstance(field, bytes) else str(field)

    def claim(self, role: str, at_most: int, *, max_calls: int, max_tokens: int,
              now: float, lease_s: float) -> list[dict[str, Any]]:
        """Take up to `at_most` queued runs, within the day's budget (each counted a call),
        each held until `now + lease_s` under the id in its `claim` field; claims past
        their deadline go back to the queue first, their calls refunded."""
        keys = [QUEUE_KEY_TEMPLATE.format(role=role),
                DAY_KEY_TEMPLATE.format(role=role, day=day_of(now)),
                CLAIMED_KEY_TEMPLATE.format(role=role), DEADLINES_KEY_TEMPLATE.format(role=role)]
        with _redis_errors():
            raw = self._claim(keys=keys, args=[at_most, max_calls, max_tokens, DAY_TTL_S, now,
                                               now + lease_s, uuid.uuid4().hex,
                                               _day_prefix(role), day_of(now)])
        flat = list(raw or ())
        return [{**json.loads(item), "claim": _text(claim)}
                for claim, item in zip(flat[::2], flat[1::2])]

    def held(self, role: str, claims: list[str]) -> dict[str, dict[str, Any]]:
        """The claims among `claims` still held (not answered, not past their deadline and
        sent back), each with the item it was handed out with."""
        if not claims:
            return {}
        with _redis_errors():
            found = self.connection.hmget(CLAIMED_KEY_TEMPLATE.format(role=role), claims)
        return {claim: json.loads(_text(entry).split("|", 1)[1])
                for claim, entry in zip(claims, found) if entry is not None}

    def release(self, role: str, claims: list[str], *, refund: bool) -> int:
        """Drop the claims still held (a verdict came; or, with `refund`, the run cannot be
        judged and its call is given back); how many were held."""
        if not claims:
            return 0
        keys = [CLAIMED_KEY_TEMPLATE.format(role=role), DEADLINES_KEY_TEMPLATE.format(role=role)]
        with _redis_errors():
            return int(self._release(keys=keys,
                                     args=["1" if refund else "0", _day_prefix(role), *claims]))

    def record(self, role: str, item: Mapping[str, Any], verdicts: Mapping[str, Any],
               tokens: int, now: float) -> None:
        """Store one run's verdicts, count them in its stage window, add the spend."""
        day = DAY_KEY_TEMPLATE.format(role=role, day=day_of(now))
        counts = COUNTS_KEY_TEMPLATE.format(role=role, epoch=item["epoch"])
        stored = VERDICTS_KEY_TEMPLATE.format(role=role)
        entry = {"time": now, "criteria": dict(verdicts)}
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.hset(stored, f"{item.get('reporter') or ''}|{item['run_id']}", json.dumps(entry))
            pipe.hset(stored, f"*|{item['run_id']}", json.dumps(entry))
            pipe.expire(stored, VERDICT_TTL_S)
            for key, verdict in verdicts.items():
                outcome = "pass" if verdict["pass"] else "fail"
                pipe.hincrby(counts, f"{item['arm']}|{key}|{outcome}", 1)
            pipe.expire(counts, DAY_TTL_S)
            pipe.hincrby(day, "judged", 1)
            pipe.hincrby(day, "tokens", max(0, int(tokens)))
            pipe.expire(day, DAY_TTL_S)
            pipe.execute()

    def record_error(self, role: str, message: str, tokens: int, now: float) -> None:
        """Count a judge error (timeout, refusal, garbage) and keep the last one's message."""
        day = DAY_KEY_TEMPLATE.format(role=role, day=day_of(now))
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.hincrby(day, "errors", 1)
            pipe.hincrby(day, "tokens", max(0, int(tokens)))
            pipe.hset(day, "last_error", message[:500])
            pipe.expire(day, DAY_TTL_S)
            pipe.execute()

    def add_spend(self, role: str, tokens: int, now: float) -> None:
        """Count one judged ask that is not a criteria verdict (a pairwise one) and its tokens."""
        day = DAY_KEY_TEMPLATE.format(role=role, day=day_of(now))
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.hincrby(day, "judged", 1)
            pipe.hincrby(day, "tokens", max(0, int(tokens)))
            pipe.expire(day, DAY_TTL_S)
            pipe.execute()

    def day(self, role: str, now: float) -> dict[str, Any]:
        """The UTC day's counters (zeros when nothing happened), the queue's length and the
        claims held."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hgetall(DAY_KEY_TEMPLATE.format(role=role, day=day_of(now)))
            pipe.llen(QUEUE_KEY_TEMPLATE.format(role=role))
            pipe.zcard(DEADLINES_KEY_TEMPLATE.format(role=role))
            raw, waiting, claimed = pipe.execute()
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        out: dict[str, Any] = {name: int(fields.get(name, 0)) for name in DAY_FIELDS}
        out["waiting"] = int(waiting)
        out["claimed"] = int(claimed)
        out["last_error"] = fields.get("last_error")
        return out

    def counts(self, role: str, epoch: str) -> dict[str, dict[str, tuple[int, int]]]:
        """arm -> criterion key -> (passed, failed) over the stage window `epoch`."""
        with _redis_errors():
            raw = self.connection.hgetall(COUNTS_KEY_TEMPLATE.format(role=role, epoch=epoch))
        out: dict[str, dict[str, list[int]]] = {}
        for field, value in raw.items():
            text = field.decode() if isinstance(field, bytes) else str(field)
            arm, rest = text.split("|", 1)
            key, outcome = rest.rsplit("|", 1)
            slot = out.setdefault(arm, {}).setdefault(key, [0, 0])
            slot[0 if outcome == "pass" else 1] += int(value)
        return {arm: {key: (p, f) for key, (p, f) in keys.items()} for arm, keys in out.items()}

    def agree(self, role: str, source: str, results: Mapping[str, bool]) -> None:
        """Count, per criterion key, whether the judge agreed with `source` (human, self)."""
        if not results:
            return
        key = AGREEMENT_KEY_TEMPLATE.format(role=role)
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            for criterion, agreed in results.items():
                pipe.hincrby(key, f"{source}|{criterion}|{'agree' if agreed else 'disagree'}", 1)
            pipe.expire(key, DAY_TTL_S * 4)
            pipe.execute()

    def agreement(self, role: str) -> dict[str, dict[str, dict[str, Any]]]:
        """source -> criterion key -> {agree, disagree, n, rate}."""
        with _redis_errors():
            raw = self.connection.hgetall(AGREEMENT_KEY_TEMPLATE.format(role=role))
        counts: dict[str, dict[str, list[int]]] = {}
        for field, value in raw.items():
            text = field.decode() if isinstance(field, bytes) else str(field)
            source, rest = text.split("|", 1)
            criterion, outcome = rest.rsplit("|", 1)
            slot = counts.setdefault(source, {}).setdefault(criterion, [0, 0])
            slot[0 if outcome == "agree" else 1] += int(value)
        return {source: {k: {"agree": a, "disagree": d, "n": a + d,
                             "rate": a / (a + d) if a + d else None}
                         for k, (a, d) in sorted(keys.items())}
                for source, keys in sorted(counts.items())}

    def verdicts(self, role: str, run_id: str, reporter: str | None) -> dict[str, Any] | None:
        """One run's stored verdicts, or None when it was never judged."""
        with _redis_errors():
            raw = self.connection.hget(VERDICTS_KEY_TEMPLATE.format(role=role),
                                       f"{reporter or ''}|{run_id}")
        return None if raw is None else dict(json.loads(raw))
