"""A request's ingest quota charge, counted inside the ingest script that stores its traces.

The quota (`router.server.quota`: traces and bytes per token per second) is
counted in the same round trip as the store, for every shape of request: the
first script call of the request (its "leader") makes the INCRBYs before it
looks at anything else; over a limit it answers `Q` and stores nothing. A
request of several calls (a canary batch has a group per arm; a large one a call
per 200 traces) sends them pipelined on one connection, so Redis runs them in
order: the leader, when it refuses the charge, also sets a marker key of this
request, and every later call ("after") looks for the marker first and answers
`Q` too. So an over-quota request stores nothing, in any of its calls, and a
within-quota one is never refused half-way by another client's charge landing
between its calls (the later calls read only this request's marker).

Only a standalone Redis can take it: the quota keys hash to the token's slot,
not the role's (`TraceStore.takes_charge`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

#: The ingest script's charge step (`trace_ingest.INGEST_SCRIPT`): `charge_quota(ARGV[10],
#: first)`, `first` the index in KEYS of the charge's keys. Nil to go on storing, or the
#: script's answer {"Q", "traces"|"bytes", used}.
#:
#: ARGV[10]: "" (no charge), "after" (KEYS[first] is the request's marker), or
#: "traces bytes traces_limit bytes_limit ttl" with " m" when the request has more calls
#: (KEYS[first], KEYS[first + 1] the counters, KEYS[first + 2] the marker).
QUOTA_LUA = r"""
local function charge_quota(spec, first)
  if spec == '' then return nil end
  if spec == 'after' then
    local refused = redis.call('GET', KEYS[first])
    if not refused then return nil end
    local what, used = string.match(refused, '(%a+) (%d+)')
    return {'Q', what, used}
  end
  local traces, size, traces_limit, bytes_limit, ttl, marked =
    string.match(spec, '(%d+) (%d+) (%d+) (%d+) (%d+)( ?m?)')
  -- A counter INCRBY just created (it holds only this charge) gets its TTL; the
  -- window is one second, so it never needs a longer one.
  local used_traces = redis.call('INCRBY', KEYS[first], traces)
  if used_traces == tonumber(traces) then redis.call('EXPIRE', KEYS[first], ttl) end
  local used_bytes = redis.call('INCRBY', KEYS[first + 1], size)
  if used_bytes == tonumber(size) then redis.call('EXPIRE', KEYS[first + 1], ttl) end
  local over = nil
  if tonumber(traces_limit) > 0 and used_traces > tonumber(traces_limit) then
    over = {'Q', 'traces', tostring(used_traces)}
  elseif tonumber(bytes_limit) > 0 and used_bytes > tonumber(bytes_limit) then
    over = {'Q', 'bytes', tostring(used_bytes)}
  end
  if over and marked == ' m' then
    redis.call('SET', KEYS[first + 2], over[2] .. ' ' .. over[3], 'EX', ttl)
  end
  return over
end
"""

#: ARGV[10] of a request's later calls.
AFTER = "after"


@dataclass(frozen=True)
class Charge:
    """A request's charge against its token's ingest quota, run inside the ingest script.

    The key names and limits are the router's (`router.server.quota`); a limit of
    0 is off. `marker` is set by `for_calls` when the request takes more than one
    script call: the key (in the token's slot, beside the counters) under which
    the leader says it refused the charge.
    """

    traces_key: str
    bytes_key: str
    traces: int
    size: int
    traces_limit: int
    bytes_limit: int
    ttl_s: int
    marker: str = ""

    def spec(self) -> str:
        """ARGV[10] of the leader's call."""
        base = f"{self.traces} {self.size} {self.traces_limit} {self.bytes_limit} {self.ttl_s}"
        return f"{base} m" if self.marker else base

    def keys(self) -> list[str]:
        """The leader's charge keys: the two counters, and the marker when there is one."""
        return [self.traces_key, self.bytes_key, *([self.marker] if self.marker else [])]

    def for_calls(self, calls: int) -> Charge:
        """This charge for a request of `calls` script calls (a marker when more than one)."""
        if calls <= 1:
            return self
        return replace(self, marker=f"{self.traces_key}:refused:{os.urandom(8).hex()}")


@dataclass(frozen=True)
class After:
    """A later script call of a request whose first call carries its `Charge` (with `marker`)."""

    marker: str

    def spec(self) -> str:
        """ARGV[10] of the call: refuse when the leader marked the charge refused."""
        return AFTER

    def keys(self) -> list[str]:
        """The marker, the one charge key of a later call."""
        return [self.marker]


class OverQuota(Exception):
    """The charge went over the token's limit of `what` ("traces" or "bytes"): nothing stored."""

    def __init__(self, what: str, used: int, limit: int) -> None:
        super().__init__(f"over the {what} quota: {used} of {limit}")
        self.what, self.used, self.limit = what, used, limit
