"""Storing traces: the ingest script, the groups it stores, and what it answers.

One Lua call per (role, config, arm, epoch) group stores a batch, a group being
at most `traces.MAX_TRACES_PER_SCRIPT` traces so no call blocks Redis for long
(a larger batch is several groups, still one pipelined round trip). The
caller says which run ids it expects to be known already (none, at first); the
script checks every run-id key, and if the guess was wrong it writes nothing
and answers which are known, so the caller sums the increments of the new ones
and calls again. Otherwise it appends each new trace, records it in its run
id's claims and adds the group's summed increments to the aggregate, all in one
atomic step. A client retrying a run id therefore never counts twice, and the
common all-new batch costs one round trip carrying one summed set of increments.

Run ids are known per reporter (the token that sent the trace): a run id is a
hash of reporter -> location (`trace_keys.CLAIMS_KEY_TEMPLATE`). Ids are often
predictable (`eval-<role>-<n>`), and a dedupe on the bare id let one token post
passing traces under another's run ids so the real runs came back `duplicate`
and were never counted. Now each reporter's run is stored and counted in its
own window whoever claimed the id first; a run id already claimed by another
reporter is a clash: stored and counted as its reporter's like any new run,
answered `C` with the earlier claimants, and counted in the window's `clashes`
field. A clash changes no count of the earlier claim, so it never raises a pass
rate; with `trusted_reporters` an untrusted claimant counts nowhere, as always.

Which stage a trace counts in is the authoritative binding's, not a worker's
copy (refreshed every 0.2 s): a caller that checked a trace against binding
version V says so (`Checked.version`), and the script compares V with the
version in the binding hash (same slot: the role is the hash tag) before it
writes anything. When the binding has moved on, the group is answered `Moved`
and nothing is written; the caller re-reads the binding and checks again.

`gatekeeper.store.traces.TraceStore.add` runs the groups; the key names are in
`gatekeeper.store.trace_keys`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from bindings.store import binding_key
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.store.ingest_quota import QUOTA_LUA, After
from gatekeeper.store.ingest_quota import Charge as Charge  # callers import it from here
from gatekeeper.store.ingest_quota import OverQuota as OverQuota  # callers import it from here
from gatekeeper.store.run_matches import MATCH_LUA
from gatekeeper.store.trace_keys import (
    Location,
    claims_key,
    configs_key,
    pending_key,
    reporters_key,
    stream_key,
    tally_key,
    window_key,
)
from gatekeeper.store.unit_events import UNITS_LUA, UnitFacts, unit_keys
from gatekeeper.store.window_fold import FOLD_AT, FOLD_FUNCTION, FOLD_NOW_BYTES
from gatekeeper.window_fields import TOOL, Increments
from rolegate.trace import Trace

# KEYS: stream, window hash, tally hash, configs set, binding hash, the window's
#       pending list and reporters set (`window_fold`), then one claims hash per
#       trace, then (when ARGV[10] is set) the charge's keys (`ingest_quota`): the
#       token's quota counters of traces and of bytes for this second, and the
#       request's marker when it has more calls; or the marker alone ("after")
# ARGV: maxlen, run ttl, window ttl, location prefix, config, n traces,
#       the summed increments of the traces expected new, as "field\nvalue\n...",
#       the binding version the traces were checked against ("" for none),
#       the reporter's name ("" for none),
#       the quota charge (`ingest_quota.QUOTA_LUA`; "" for none),
#       the tally's share of the increments (n, tool:*), encoded the same way,
#       then (trace JSON, verdict JSON, "1" if expected known else "0") * n traces
# A new trace whose run id was minted at assignment removes that id from its reporter's
# pending set beside the window (`run_matches.MATCH_LUA`).
# Returns {"Q", "traces"|"bytes", used} without storing when the charge went over
# a limit (the charge still counts); {"V", version or ""} without writing when
# the binding is at another version; {"R", "0"|"1" per trace} without writing
# when the expectation was wrong (known: this reporter claimed the run id);
# else {"OK", per trace "N<location>" when stored, "C<location>\n<reporter>..."
# when stored under a run id other reporters claimed first (their names, one a
# line), or "D<location>" when known}. Clashes add a "clashes" field to the
# window entry. The quota is charged before anything
# else is looked at, so a caller re-sending a group after "V" or "R" leaves the
# charge out: it counted once. A request's later calls answer "Q" too when its first
# refused the charge (`ingest_quota`). The window's increments go to its pending list
# as one entry, folded into the window hashes every FOLD_AT entries, or at once
# when the entry is longer than FOLD_NOW_BYTES (`window_fold`).
INGEST_SCRIPT = FOLD_FUNCTION + UNITS_LUA + MATCH_LUA + QUOTA_LUA + """
local n = tonumber(ARGV[6])
-- The unit test's lines (`unit_events`), one per trace, when the group has any.
local ulines = nil
if ARGV[12 + 3 * n] then ulines = unit_lines(ARGV[12 + 3 * n]) end
local over = charge_quota(ARGV[10], 8 + n)
if over then return over end
if ARGV[8] ~= '' then
  local version = redis.call('HGET', KEYS[5], 'version')
  if version ~= ARGV[8] then return {'V', version or ''} end
end
local known, wrong = {}, false
for i = 1, n do
  known[i] = redis.call('HGET', KEYS[7 + i], ARGV[9])
  if (known[i] ~= false) ~= (ARGV[11 + 3 * i] == '1') then wrong = true end
end
if wrong then
  local flags = {'R'}
  for i = 1, n do flags[i + 1] = known[i] and '1' or '0' end
  return flags
end
local out, added, clashes = {'OK'}, 0, 0
for i = 1, n do
  if known[i] then
    out[i + 1] = 'D' .. known[i]
  else
    local claims = KEYS[7 + i]
    local others = redis.call('HKEYS', claims)
    local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
                          't', ARGV[9 + 3 * i], 'v', ARGV[10 + 3 * i])
    local location = ARGV[4] .. id .. '"}'
    redis.call('HSET', claims, ARGV[9], location)
    redis.call('EXPIRE', claims, ARGV[2])
    -- The run's own assignment is matched (`run_matches`): stored and matched at once.
    match_run(KEYS[2], ARGV[9], claims)
    if #others > 0 then
      out[i + 1] = 'C' .. location .. '\\n' .. table.concat(others, '\\n')
      clashes = clashes + 1
    else
      out[i + 1] = 'N' .. location
    end
    if ulines and ulines[i] and ulines[i] ~= '' then
      record_unit(ulines[i], KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS],
                  ARGV[3])
    end
    added = added + 1
  end
end
if added > 0 then
  for name, value in string.gmatch(ARGV[11], '([^\\n]+)\\n(%-?%d+)') do
    redis.call('HINCRBY', KEYS[3], name, value)
  end
  redis.call('SADD', KEYS[4], ARGV[5])
  local entry = #ARGV[9] .. ':' .. ARGV[9] .. ARGV[7]
  if clashes > 0 then entry = entry .. 'clashes\\n' .. clashes .. '\\n' end
  local waiting = redis.call('RPUSH', KEYS[6], entry)
  if waiting >= FOLD_AT or #entry > FOLD_NOW_BYTES then
    fold(KEYS[6], KEYS[2], KEYS[7], ARGV[3])
  else
    -- Everything the fold writes lives window-ttl past the last trace, as the
    -- pending list does: else a window folded long ago could expire while
    -- newer traces still wait in the list.
    redis.call('EXPIRE', KEYS[6], ARGV[3])
    redis.call('EXPIRE', KEYS[2], ARGV[3])
    -- The window's closed-cells hash (`window_closed`) is part of it: it lives as long.
    redis.call('EXPIRE', KEYS[2] .. ':closed', ARGV[3])
    if ARGV[9] ~= '' then
      redis.call('EXPIRE', KEYS[2] .. ':by:' .. ARGV[9], ARGV[3])
      redis.call('EXPIRE', KEYS[7], ARGV[3])
    end
  end
end
return out
""".replace("FOLD_AT", str(FOLD_AT)).replace("FOLD_NOW_BYTES", str(FOLD_NOW_BYTES))



# Immutable as a NamedTuple rather than a frozen dataclass: ingest builds one per trace,
# and a frozen dataclass sets each field through object.__setattr__ (about 5x the cost).
class Stored(NamedTuple):
    """The outcome of storing one trace: new or a duplicate of a run id its reporter sent before.

    `clash` names the other reporters that claimed the run id before this new
    trace did (empty for most runs; a duplicate is never a clash).
    """

    run_id: str
    duplicate: bool
    location: Location
    clash: tuple[str, ...] = ()



@dataclass(frozen=True)
class Moved:
    """A trace not stored: its role's binding is no longer at the version it was checked against.

    `version` is the binding's version now (None: the role has no binding).
    Check the trace against the binding as it is now and add it again.
    """

    run_id: str
    version: int | None


# Immutable as a NamedTuple rather than a frozen dataclass: ingest builds one per trace,
# and a frozen dataclass sets each field through object.__setattr__ (about 5x the cost).
class Checked(NamedTuple):
    """A validated trace ready to store: its verdict and the window epoch it counts in.

    `version` is the binding version the verdict and epoch were read from; the
    store writes the trace only while the binding is still at it. None stores it
    unconditionally (tests, tools that write a known epoch).
    """

    trace: Trace
    verdict: TraceVerdict
    epoch: str
    version: int | None = None
    #: The role's own stream cap (its binding's `trace_retention`); None: the store's.
    retention: int | None = None
    #: What the run adds to the unit test (`gatekeeper.store.unit_events`); None: nothing.
    units: UnitFacts | None = None
    #: When the report arrived (the router's clock): its lag from the run's start says
    #: when the run's cell can be read (`window.LAG`). None: at the run's end (`time`).
    reported_at: float | None = None


class IngestGroup:
    """The traces of one (role, config, arm, epoch, version) in a request: one script call.

    A run id repeated within the request is sent once; its repeats are answered
    as duplicates of the first.
    """

    def __init__(self, role: str, config: str, arm: str, epoch: str,
                 version: int | None, reporter: str | None = None) -> None:
        self.role, self.config, self.arm, self.epoch = role, config, arm, epoch
        self.version = version
        #: Every trace of the group was reported by this token (None: not stamped).
        self.reporter = reporter
        self.items: list[Checked] = []
        self.indices: list[int] = []
        self.repeats: list[tuple[int, int]] = []  # (index in request, position in items)
        self.expect_known: list[bool] | None = None
        #: The role's stream cap when its binding sets one (else the store's applies).
        self.retention: int | None = None
        self._seen: dict[str, int] = {}
        #: The stored location JSON up to the stream id, which the script appends.
        self.prefix = _location_prefix(config, arm, epoch)

    def take(self, index: int, item: Checked) -> None:
        """Add the request's trace number `index`."""
        first = self._seen.get(item.trace.run_id)
        if first is not None:
            self.repeats.append((index, first))
            return
        self._seen[item.trace.run_id] = len(self.items)
        if item.retention is not None:
            self.retention = item.retention
        self.items.append(item)
        self.indices.append(index)

    def moved(self, items: Sequence[Checked], version: int | None,
              results: list[Stored | Moved | None]) -> None:
        """Answer every trace of the group `Moved`: the binding is at `version` now."""
        for index in self.indices:
            results[index] = Moved(items[index].trace.run_id, version)
        for index, _ in self.repeats:
            results[index] = Moved(items[index].trace.run_id, version)

    def resolve(self, items: Sequence[Checked], answers: list[str],
                results: list[Stored | Moved | None]) -> None:
        """Fill `results` from the script's per-trace answers."""
        start = 1 + len(self.prefix)
        config, arm, epoch = self.config, self.arm, self.epoch
        # The two NamedTuples of every trace built by tuple.__new__, every field given:
        # their generated __new__ is a Python frame each (about 150 against 70 ns).
        new = tuple.__new__
        for index, text in zip(self.indices, answers):
            if text[0] == "N":
                # Stored just now under this group's location: only the id is new.
                where = new(Location, (config, arm, epoch, text[start:-2]))
                results[index] = new(Stored, (items[index].trace.run_id, False, where, ()))
            elif text[0] == "C":
                stored, *others = text.split("\n")
                where = Location(self.config, self.arm, self.epoch, stored[start:-2])
                results[index] = Stored(items[index].trace.run_id, False, where,
                                        tuple(others))
            else:
                results[index] = Stored(items[index].trace.run_id, True,
                                        Location.parse(text[1:]))
        for index, first in self.repeats:
            earlier = results[self.indices[first]]
            assert isinstance(earlier, Stored)
            results[index] = Stored(run_id=earlier.run_id, duplicate=True,
                                    location=earlier.location)


    def call(self, retention: int, run_ttl_s: int, window_ttl_s: int,
             charge: Charge | After | None = None) -> tuple[list[str], list[Any]]:
        """The script's KEYS and ARGV for this group (see INGEST_SCRIPT), with `charge` if any."""
        role, config = self.role, self.config
        items = self.items
        expect = self.expect_known
        # The increments of the traces expected new, summed (`window_fields.Increments`).
        summed = Increments()
        for index, item in enumerate(items):
            if expect is None or not expect[index]:
                summed.add(item.trace, item.verdict, item.reported_at)
        totals = summed.totals()
        keys = [*_group_keys(role, config, self.arm, self.epoch)]
        # Each run's claims key is the role's prefix and the run id (`claims_key`, formatted once).
        claims = claims_key(role, "")
        keys += [claims + item.trace.run_id for item in items]
        if charge is not None:
            keys += charge.keys()
        args: list[Any] = [retention, run_ttl_s, window_ttl_s, self.prefix,
                           config, len(items), _encode(totals),
                           "" if self.version is None else self.version,
                           self.reporter or "", "" if charge is None else charge.spec(),
                           _encode({name: value for name, value in totals.items()
                                    if name == "n" or name.startswith(TOOL)})]
        for index, item in enumerate(items):
            trace = item.trace
            # The serializer itself: model_dump_json's keyword handling cost as much again.
            args += (type(trace).__pydantic_serializer__.to_json(trace, exclude_none=True),
                     item.verdict.json_text,
                     "1" if expect is not None and expect[index] else "0")
        facts = next((item.units for item in items if item.units is not None), None)
        if facts is not None:
            # Last: one line per trace, and the group's four unit keys at the end of KEYS.
            keys += unit_keys(role, facts, self.epoch, self.arm)
            args.append("\n".join("" if item.units is None else item.units.spec()
                                   for item in items))
        return keys, args



@functools.lru_cache(maxsize=1024)
def _group_keys(role: str, config: str, arm: str,
                epoch: str) -> tuple[str, str, str, str, str, str, str]:
    """A group's stream, window, tally, configs, binding, pending and reporters keys (hot path: built once)."""
    return (stream_key(role, config, arm), window_key(role, config, arm, epoch),
            tally_key(role, config), configs_key(role), binding_key(role),
            pending_key(role, config, arm, epoch), reporters_key(role, config, arm, epoch))


@functools.lru_cache(maxsize=1024)
def _location_prefix(config: str, arm: str, epoch: str) -> str:
    """The stored location JSON of a group up to its stream id, which the script appends."""
    return json.dumps({"config": config, "arm": arm, "epoch": epoch})[:-1] + ', "id": "'


def _encode(fields: dict[str, int]) -> str:
    """Increments as the script reads them: "field\\nvalue\\n" pairs (field names hold no newline)."""
    return "".join(f"{name}\n{value}\n" for name, value in fields.items())
