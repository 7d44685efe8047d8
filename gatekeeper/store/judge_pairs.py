"""The blind pairwise judge's Redis state: shadow pairs waiting for a mate, and the tally.

In shadow both arms of a sampled job are offered to the judge (sampling is by job
key); when pairwise judging is on, the first arm's run also waits here for its
mate, and the second one's arrival queues the pair as one judge item (one script
call, so two ingest workers cannot both queue it). Every key carries the role as
a Redis Cluster hash tag:

    rolegate:{role}:judge:mates:<epoch>  "<arm>|<job key>" -> the waiting run (JSON)
    rolegate:{role}:judge:pairs:<epoch>  pairs judged: "regressions" (the candidate
                                         lost), "improvements" (it won), "ties",
                                         "safety_regressions", "last_regression"
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.store.judging import DAY_TTL_S, VERDICT_TTL_S, VERDICTS_KEY_TEMPLATE

MATES_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:mates:{epoch}"
PAIRS_KEY_TEMPLATE = "rolegate:{{{role}}}:judge:pairs:{epoch}"
#: Runs waiting for a mate per stage window at most (the rest are never paired).
MATES_MAX = 10_000
PAIR_FIELDS = ("regressions", "improvements", "ties", "safety_regressions")

# KEYS: mates. ARGV: my field, the mate's field, my run JSON, max waiting, ttl.
# Returns the mate's run JSON (and forgets it) when it waits, else parks mine.
MATE_SCRIPT = """
local mate = redis.call('HGET', KEYS[1], ARGV[2])
if mate then
  redis.call('HDEL', KEYS[1], ARGV[2])
  return mate
end
if redis.call('HLEN', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
return false
"""


class PairStore:
    """Shadow pairs for the blind pairwise judge: mating at ingest, the tally per stage."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._mate = connection.register_script(MATE_SCRIPT)

    def mate(self, role: str, key: str, item: Mapping[str, Any]) -> dict[str, Any] | None:
        """The pair item {"pair": {"current": run, "shadow": run}, ...} once both arms came."""
        arm = str(item["arm"])
        other = "current" if arm == "shadow" else "shadow"
        with _redis_errors():
            raw = self._mate(keys=[MATES_KEY_TEMPLATE.format(role=role, epoch=item["epoch"])],
                             args=[f"{arm}|{key}", f"{other}|{key}", json.dumps(dict(item)),
                                   MATES_MAX, DAY_TTL_S])
        if not raw:
            return None
        mate = json.loads(raw)
        return {"pair": {arm: dict(item), other: mate}, "key": key, "epoch": item["epoch"],
                "run_id": f"pair:{key}", "arm": "shadow", "config": item["config"]
                if arm == "shadow" else mate["config"], "reporter": None}

    def record(self, role: str, epoch: str, pair: Mapping[str, Any],
               verdict: Mapping[str, Any], now: float) -> None:
        """Count one judged pair and store its verdict with both traces."""
        counts = PAIRS_KEY_TEMPLATE.format(role=role, epoch=epoch)
        stored = VERDICTS_KEY_TEMPLATE.format(role=role)
        entry = json.dumps({"time": now, "pairwise": dict(verdict)})
        winner = verdict["winner"]
        field = {"BASELINE": "regressions", "CANDIDATE": "improvements"}.get(winner, "ties")
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            for run in pair.values():
                pipe.hset(stored, f"pairwise|{run['run_id']}", entry)
            pipe.expire(stored, VERDICT_TTL_S)
            pipe.hincrby(counts, field, 1)
            if verdict.get("safety") and verdict.get("regression_detected"):
                pipe.hincrby(counts, "safety_regressions", 1)
                pipe.hset(counts, "last_safety_regression", str(verdict.get("reasoning"))[:500])
            if field == "regressions":
                pipe.hset(counts, "last_regression", str(verdict.get("reasoning"))[:500])
            pipe.expire(counts, DAY_TTL_S)
            pipe.execute()

    def counts(self, role: str, epoch: str) -> dict[str, Any]:
        """The stage window's pair tally: counts, and the last (safety) regression's reason."""
        with _redis_errors():
            raw = self.connection.hgetall(PAIRS_KEY_TEMPLATE.format(role=role, epoch=epoch))
        fields = {_text(k): _text(v) for k, v in raw.items()}
        out: dict[str, Any] = {name: int(fields.get(name, 0)) for name in PAIR_FIELDS}
        out["pairs"] = out["regressions"] + out["improvements"] + out["ties"]
        out["last_regression"] = fields.get("last_regression")
        out["last_safety_regression"] = fields.get("last_safety_regression")
        return out

    def verdict(self, role: str, run_id: str) -> dict[str, Any] | None:
        """The pairwise verdict stored with one run (either side of its pair), or None."""
        with _redis_errors():
            raw = self.connection.hget(VERDICTS_KEY_TEMPLATE.format(role=role),
                                       f"pairwise|{run_id}")
        return None if raw is None else dict(json.loads(raw))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
