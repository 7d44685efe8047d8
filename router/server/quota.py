"""Per-token ingest quotas: traces per second and bytes per second, counted in Redis.

Without them one caller token could fill Redis until every write, rollbacks
included, fails (a 7 MiB trace was accepted in 0.15 s: about 47 MB/s per
connection). Each token (by its name) has its own counters, shared by every
worker and router on the Redis: each ingest request adds its traces and bytes
to the current one-second window, inside the ingest script that stores it
(`gatekeeper.store.ingest_quota`; on a Redis Cluster a pipelined round trip of
its own, `charge`). Over
either limit the request is refused with 429 and `Retry-After`, nothing of it
stored; it still counts, so hammering does not earn a quicker turn.

`ROLEGATE_INGEST_QUOTA="traces=50000,bytes=16777216"` (per second, per token);
0 turns a limit off. The traces default leaves headroom over the ingest target
one router is benched against (bench/ingest.py: 10,000 traces/s through one
token); the bytes default stays above the largest single body allowed
(ROLEGATE_MAX_BODY_BYTES, 8 MiB), so any one valid request can get through.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from bindings.connection import Connection
from gatekeeper.store.ingest_quota import Charge

DEFAULT_TRACES_PER_S = 50_000
DEFAULT_BYTES_PER_S = 16 * 1024 * 1024
#: KEYS are built here, never inline: the token's name is the hash tag.
QUOTA_KEY_TEMPLATE = "rolegate:quota:{{{name}}}:{what}:{second}"
#: A window's counters outlive it briefly, then Redis drops them.
WINDOW_TTL_S = 5


@dataclass(frozen=True)
class Quota:
    """Limits per token per second; 0 means no limit."""

    traces_per_s: int = DEFAULT_TRACES_PER_S
    bytes_per_s: int = DEFAULT_BYTES_PER_S


@dataclass(frozen=True)
class Refusal:
    """Why a request went over its quota, and when to try again."""

    what: str
    used: int
    limit: int
    retry_after_s: int

    @property
    def message(self) -> str:
        """A sentence for the 429 body."""
        unit = "traces" if self.what == "traces" else "bytes"
        return (f"ingest quota exceeded: {self.used} {unit} this second, limit "
                f"{self.limit} {unit}/s per token; retry after {self.retry_after_s} s")


def parse_quota(spec: str) -> Quota:
    """`traces=N,bytes=M` (either may be left out) -> Quota; ValueError naming a bad part."""
    values = {"traces": DEFAULT_TRACES_PER_S, "bytes": DEFAULT_BYTES_PER_S}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition("=")
        if not sep or name.strip() not in values:
            raise ValueError(f"ROLEGATE_INGEST_QUOTA: expected traces=N,bytes=M, got {part!r}")
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"ROLEGATE_INGEST_QUOTA: {name.strip()} must be a whole number, "
                             f"got {raw.strip()!r}") from None
        if value < 0:
            raise ValueError(f"ROLEGATE_INGEST_QUOTA: {name.strip()} must not be negative")
        values[name.strip()] = value
    return Quota(traces_per_s=values["traces"], bytes_per_s=values["bytes"])


def quota_key(name: str, what: str, second: int) -> str:
    """The counter of `what` ("traces" or "bytes") for token `name` in window `second`."""
    return QUOTA_KEY_TEMPLATE.format(name=name, what=what, second=second)


def charge(connection: Connection, quota: Quota, name: str, traces: int, size: int,
           now: float | None = None) -> Refusal | None:
    """Count a request of `traces` traces and `size` bytes for token `name`; None if within quota."""
    if quota.traces_per_s <= 0 and quota.bytes_per_s <= 0:
        return None
    now = time.time() if now is None else now
    second = int(now)
    pipe = connection.pipeline(transaction=False)
    for what, amount in (("traces", traces), ("bytes", size)):
        key = quota_key(name, what, second)
        pipe.incrby(key, amount)
        pipe.expire(key, WINDOW_TTL_S)
    used_traces, _, used_bytes, _ = pipe.execute()
    if quota.traces_per_s > 0 and int(used_traces) > quota.traces_per_s:
        return refusal("traces", int(used_traces), quota.traces_per_s, now)
    if quota.bytes_per_s > 0 and int(used_bytes) > quota.bytes_per_s:
        return refusal("bytes", int(used_bytes), quota.bytes_per_s, now)
    return None


def script_charge(quota: Quota, name: str, traces: int, size: int, now: float) -> Charge | None:
    """The same count as `charge`, for the ingest script to make (None: quotas are off).

    Same keys, same window, same limits: only the round trip is shared with the
    store (gatekeeper.store.ingest_quota.Charge).
    """
    if quota.traces_per_s <= 0 and quota.bytes_per_s <= 0:
        return None
    second = int(now)
    return Charge(quota_key(name, "traces", second), quota_key(name, "bytes", second),
                  traces, size, quota.traces_per_s, quota.bytes_per_s, WINDOW_TTL_S)


def refusal(what: str, used: int, limit: int, now: float) -> Refusal:
    """The refusal of a count of `what` that reached `used` over `limit` in the second of `now`."""
    return Refusal(what, used, limit, max(1, math.ceil(int(now) + 1 - now)))
