"""Storing the unit test's facts at ingest, in the same script that stores the trace.

Per rollout (the candidate, and its salt when the binding draws one) and per
role, all under the role's hash tag so one script writes them atomically with
the trace:

- ``rolegate:{role}:units:seen:<rollout>``: a hash ``<metric>|<unit> -> start
  second`` of each unit's first event of each metric (HSETNX: a unit counts
  once per metric per rollout, however many runs or retries it has);
- ``rolegate:{role}:units:<epoch>:<arm>``: per stage and arm, ``runs``,
  ``lag|<bucket>`` (report lag histogram), ``r|<metric>`` (runs with the event)
  and ``e|<metric>|<second>`` (units whose first event started in that second);
- ``rolegate:{role}:units:hll:<rollout>:<arm>``: a HyperLogLog of the arm's units;
- ``rolegate:{role}:units:limits:<rollout>``: ``slow_ms`` and ``costly_micros``,
  fixed once per rollout from current's runs (`gatekeeper.view.units`), and
  ``from_s``, the second they apply from; a run started then or later over a
  limit is a ``slow`` / ``costly`` event, decided in the script so every
  router reads the same limit.

Units are hashed (8 bytes of BLAKE2b): a customer id never lands in Redis as a
field name. Which runs count: canary and full stages, the binding's own
configs on their own arms, runs no targeting rule picked (a rule's population is
not randomised), judged runs, from a trusted reporter when the policy names some.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, NamedTuple

from bindings.models import Binding, Stage
from gatekeeper.checks.criteria import Criterion, evaluate
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.stats.units import CRITERION, ArmUnits, lag_bucket
from gatekeeper.store.gated_criteria import config_criteria, gated
from rolegate.trace import Trace

UNIT_STAGES = frozenset({Stage.CANARY, Stage.FULL})
#: How much more a candidate's run may cost than current's before it is "costly"
#: (the latency's is the policy's `max_p95_latency_increase`).
COST_TOLERANCE = 0.2
UNITS_PREFIX = "rolegate:{{{role}}}:units:"
#: A unit's hash: 8 bytes of BLAKE2b (each unit's is an update of a copy of this one).
_UNIT_HASH = hashlib.blake2b(digest_size=8)


def rollout_id(binding: Binding) -> str | None:
    """The rollout the binding's candidate belongs to (its salt included when it has one)."""
    if binding.candidate is None:
        return None
    salt = binding.salt
    return binding.candidate if not salt else f"{binding.candidate}|{salt}"


def seen_key(role: str, rollout: str) -> str:
    return UNITS_PREFIX.format(role=role) + f"seen:{rollout}"


def epoch_units_key(role: str, epoch: str, arm: str) -> str:
    return UNITS_PREFIX.format(role=role) + f"{epoch}:{arm}"


def hll_key(role: str, rollout: str, arm: str) -> str:
    return UNITS_PREFIX.format(role=role) + f"hll:{rollout}:{arm}"


def limits_key(role: str, rollout: str) -> str:
    return UNITS_PREFIX.format(role=role) + f"limits:{rollout}"


def unit_of(binding: Binding, trace: Trace) -> str | None:
    """The unit a run was randomised by: the `bucket_by` attribute's value, else its key.

    None when the binding buckets by an attribute the run does not carry: such a
    job was not randomised (it is served current), so it is no unit of the test.
    """
    by = binding.bucket_by
    if by:
        value = (trace.attributes or {}).get(by)
        return f"{by}={value}" if value else None
    return trace.key or f"run={trace.run_id}"


def _safe(name: str) -> str:
    """A metric name the script can split on (no spaces, commas or bars)."""
    return name.replace(" ", "_").replace(",", "_").replace("|", "_")


# Immutable as a NamedTuple rather than a frozen dataclass: ingest builds one per trace,
# and a frozen dataclass sets each field through object.__setattr__ (about 5x the cost).
class UnitFacts(NamedTuple):
    """What one run adds to the unit test: its unit, start, report lag and events."""

    rollout: str
    unit: str
    start_second: int
    lag_bucket: int
    latency_ms: int
    cost_micros: int
    #: Events the router decided (run_failure, tool_error, crit:<key>); slow and
    #: costly are the script's, against the rollout's limits.
    metrics: tuple[str, ...]

    def spec(self) -> str:
        """The script's line for this run (see UNITS_LUA)."""
        return (f"{self.unit} {self.start_second} {self.lag_bucket} {self.latency_ms} "
                f"{self.cost_micros} {','.join(self.metrics)}")


def unit_facts(binding: Binding, trace: Trace, verdict: TraceVerdict, now: float,
               failed_criteria: tuple[str, ...] = (), connection: Any = None,
               ) -> UnitFacts | None:
    """The run's unit facts, or None when the run is not one the unit test reads.

    With `connection`, the gated spec criteria the run failed are found through it
    (`gatekeeper.store.gated_criteria`), only for a run the test reads.
    """
    return UnitRules(binding, connection).facts(trace, verdict, now, failed_criteria)


class UnitRules:
    """What the unit test reads of one binding, worked out once for all the runs checked against it.

    A batch's runs share a binding: its stage, rollout, trusted reporters and
    tolerances, and each config's gated criteria, are read once, not per run.
    """

    __slots__ = ("binding", "connection", "expected", "latency_scale", "live", "rollout",
                 "trusted", "_gated")

    def __init__(self, binding: Binding, connection: Any = None) -> None:
        """`connection`: where each config's gated spec criteria are found (None: none)."""
        self.binding = binding
        self.connection = connection
        self.live = binding.stage in UNIT_STAGES
        self.expected = {"candidate": binding.candidate, "current": binding.current}
        self.trusted = binding.gate.trusted_reporters
        self.rollout = rollout_id(binding)
        self.latency_scale = 1.0 + (binding.gate.thresholds.max_p95_latency_increase or 0.0)
        self._gated: dict[str, tuple[Criterion, ...]] = {}

    def facts(self, trace: Trace, verdict: TraceVerdict, now: float,
              failed_criteria: tuple[str, ...] = ()) -> UnitFacts | None:
        """The run's unit facts (see `unit_facts`)."""
        if not self.live or trace.time is None or trace.rule is not None:
            return None
        if not verdict.judged:
            return None
        expected = self.expected.get(trace.arm)
        if expected is None or expected != trace.config:
            return None
        trusted = self.trusted
        if trusted is not None and trace.reporter not in trusted:
            return None
        rollout, named = self.rollout, unit_of(self.binding, trace)
        if rollout is None or named is None:
            return None
        start = trace.time - trace.latency_s
        metrics = []
        if not verdict.passed:
            metrics.append("run_failure")
        if trace.tool_errors:
            metrics.append("tool_error")
        if self.connection is not None:
            failed_criteria = self._failed_gated(trace)
        metrics += [_safe(CRITERION + key) for key in failed_criteria]
        # A copy of an empty hasher: constructing one parses its keywords (3x the cost here).
        hasher = _UNIT_HASH.copy()
        hasher.update(named.encode())
        unit = hasher.hexdigest()
        latency, cost = trace.latency_s, trace.cost_usd
        if trace.arm == "candidate":
            # The candidate is slow or costly past the limit raised by what the policy lets
            # it add: under "no worse than that", its units cross it no more often than
            # current's cross the limit itself, so the coin stays fair (or favours it).
            latency /= self.latency_scale
            cost /= 1.0 + COST_TOLERANCE
        # Every field in order, by tuple.__new__: the NamedTuple's __new__ is a Python frame.
        return tuple.__new__(UnitFacts, (rollout, unit, math.floor(start), lag_bucket(now - start),
                                         round(latency * 1000), round(cost * 1_000_000),
                                         tuple(metrics)))

    def _failed_gated(self, trace: Trace) -> tuple[str, ...]:
        """The gated criterion keys the run failed; its config's criteria read once here."""
        criteria = self._gated.get(trace.config)
        if criteria is None:
            criteria = self._gated[trace.config] = gated(
                config_criteria(self.connection, trace.config), self.binding)
        if not criteria:
            return ()
        return tuple(key for key, held in evaluate(criteria, trace).items() if held is False)


def unit_keys(role: str, facts: UnitFacts, epoch: str, arm: str) -> list[str]:
    """The script's four unit keys for a group: seen, the epoch's arm hash, HLL, limits."""
    return [seen_key(role, facts.rollout), epoch_units_key(role, epoch, arm),
            hll_key(role, facts.rollout, arm), limits_key(role, facts.rollout)]


#: The ingest script's unit part (`trace_ingest.INGEST_SCRIPT`): `record_unit` is
#: called for each new trace with its line of ARGV[12 + 3n]; the last four KEYS
#: are `unit_keys`. A line is "unit second lag latency_ms cost_micros metrics".
UNITS_LUA = r"""
local function unit_lines(text)
  local lines = {}
  for line in string.gmatch(text .. '\n', '([^\n]*)\n') do lines[#lines + 1] = line end
  return lines
end
local function record_unit(spec, seen, hash, hll, limits, ttl)
  local unit, second, lag, latency, cost, metrics =
    string.match(spec, '^(%S+) (%-?%d+) (%d+) (%d+) (%d+) ?(.*)$')
  if not unit then return end
  redis.call('HINCRBY', hash, 'runs', 1)
  redis.call('HINCRBY', hash, 'lag|' .. lag, 1)
  redis.call('PFADD', hll, unit)
  -- The limits apply to runs started once they were fixed (`from_s`): before, only the
  -- runs that ended after it would be checked, more of the slower arm's.
  local limit = redis.call('HMGET', limits, 'slow_ms', 'costly_micros', 'from_s')
  if limit[3] and tonumber(second) >= tonumber(limit[3]) then
    if limit[1] and tonumber(latency) > tonumber(limit[1]) then metrics = metrics .. ',slow' end
    if limit[2] and tonumber(cost) > tonumber(limit[2]) then metrics = metrics .. ',costly' end
  end
  for metric in string.gmatch(metrics, '[^,]+') do
    redis.call('HINCRBY', hash, 'r|' .. metric, 1)
    if redis.call('HSETNX', seen, metric .. '|' .. unit, second) == 1 then
      redis.call('HINCRBY', hash, 'e|' .. metric .. '|' .. second, 1)
    end
  end
  redis.call('EXPIRE', seen, ttl)
  redis.call('EXPIRE', hash, ttl)
  redis.call('EXPIRE', hll, ttl)
end
"""


def parse_epoch_units(raw: Mapping[bytes | str, bytes | str], units: int = 0) -> ArmUnits:
    """One epoch's arm hash as `ArmUnits` (`units`: the arm's distinct units, from its HLL)."""
    events: dict[str, dict[int, int]] = defaultdict(dict)
    event_runs: dict[str, int] = {}
    lags: dict[int, int] = {}
    runs = 0
    for key, value in raw.items():
        name = key.decode() if isinstance(key, bytes) else key
        count = int(value)
        if name == "runs":
            runs = count
        elif name.startswith("lag|"):
            lags[int(name[4:])] = count
        elif name.startswith("r|"):
            event_runs[name[2:]] = count
        elif name.startswith("e|"):
            metric, _, second = name[2:].rpartition("|")
            events[metric][int(second)] = count
    return ArmUnits(events=dict(events), event_runs=event_runs, runs=runs, units=units,
                    lags=lags)


def merge_arm_units(parts: list[ArmUnits], units: int) -> ArmUnits:
    """The rollout's stages of one arm summed (`units`: distinct over the rollout)."""
    events: dict[str, dict[int, int]] = defaultdict(dict)
    event_runs: dict[str, int] = defaultdict(int)
    lags: dict[int, int] = defaultdict(int)
    for part in parts:
        for metric, seconds in part.events.items():
            for second, count in seconds.items():
                events[metric][second] = events[metric].get(second, 0) + count
        for metric, count in part.event_runs.items():
            event_runs[metric] += count
        for bucket, count in part.lags.items():
            lags[bucket] += count
    return ArmUnits(dict(events), dict(event_runs), sum(p.runs for p in parts), units,
                    dict(lags))
