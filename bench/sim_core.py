"""One simulated rollout through the code the gate view and the gatekeeper run.

No HTTP, no Redis, but no shortcut through the statistics either: at each
read the gate view is built by the view's own functions and judged by
`decide.decide` (`bench.sim_view`); an advance goes through `stages.apply` and
is written to the rollout's history, from which `rollout.walk` finds the
earlier stages whose counts the view's `rollout` section carries
(`rollout.carried_of`, `as_dict`).

What is simulated is only the traffic: job j arrives at j / `rate` seconds;
current passes at `base`, the candidate at `p` (or per tenant), and in shadow
the two arms' outcomes on one job share their randomness with probability
`rho` each. The gatekeeper reads **after every run** (`World.every_run`, the
strict case: a test valid at every look is read at every look) or every
`interval` seconds, its schedule. Every run lands in the counts the stores
would keep (`bench.sim_state`); a run that never reports (`World.reports`)
only in the assignments. The world itself (`World`, `Traffic`, `Outcome`) is
`bench.sim_world`'s.
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from collections.abc import Callable

from bench.sim_sections import stage_comparison
from bench.sim_state import CE, CF, CN, KE, KF, KN, Criteria, Reports, StageCounts
from bench.sim_view import Reader, Rule, gatekeeper_rule, plain_rule
from bench.sim_world import Outcome, Shock, Tenant, Traffic, World
from bindings.models import (
    DEFAULT_HOLDBACK,
    Binding,
    GatePolicy,
    HistoryEntry,
    Stage,
    VersionedBinding,
)
from gatekeeper.machine.decide import Action
from gatekeeper.machine.stages import Event, apply
from gatekeeper.stats import concurrent
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.reports import mature_before as report_bucket
from gatekeeper.stats.rollout import Carried, EarlierStage, carried_of, epoch_key, walk
from gatekeeper.store.history import HISTORY_RUNS
from gatekeeper.window import WindowStats

PASS = Run("", True)
FAIL = Run("", False)


def _start(policy: GatePolicy, holdback: float = DEFAULT_HOLDBACK) -> VersionedBinding:
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.SHADOW, share=0.0,
                      gate=policy, stage_since=0.0, holdback=holdback)
    return VersionedBinding(role="sim", version=1, binding=binding, updated_at=0.0,
                            updated_by="sim")


class History:
    """Current's newest runs (HISTORY_RUNS at most), as the history store counts them."""

    def __init__(self, rng: random.Random, base: float, runs: int) -> None:
        self.recent: deque[bool] = deque(rng.random() < base for _ in range(runs))
        self.passes = sum(self.recent)

    def add(self, passed: bool) -> None:
        """One more current run; the oldest drops out beyond HISTORY_RUNS."""
        self.recent.append(passed)
        self.passes += passed
        if len(self.recent) > HISTORY_RUNS:
            self.passes -= self.recent.popleft()

    def window(self) -> WindowStats:
        """The counts the view merges into p0's reference."""
        return WindowStats({"n": len(self.recent), "passes": self.passes})


class Ledger:
    """The binding history and each finished stage's counts, as the stores keep them."""

    def __init__(self, record: VersionedBinding, carry: bool) -> None:
        self.carry = carry
        self.entries = [_entry(record)]
        self.finished: dict[str, EarlierStage] = {}

    def advance(self, ended: VersionedBinding, counts: StageCounts,
                record: VersionedBinding) -> None:
        """`ended`'s stage is over with `counts`; `record` is the binding it advanced to."""
        binding = ended.binding
        self.finished[epoch_key(binding.stage_since)] = EarlierStage(
            binding.stage, binding.share, binding.stage_since, counts.cand_n,
            counts.cand_passes, counts.regressions, counts.improvements,
            stage_comparison(counts, ended))
        self.entries.append(_entry(record))

    def rollout(self, record: VersionedBinding) -> Carried | None:
        """The view's `rollout` section for `record`: `rollout.walk` over the history."""
        if not self.carry:
            return None
        found = walk(record, reversed(self.entries))
        if found is None:
            return None
        return carried_of(found, [self.finished[epoch_key(b.stage_since)]
                                  for b in found.earlier])


def _entry(record: VersionedBinding) -> HistoryEntry:
    return HistoryEntry(role=record.role, version=record.version, time=record.updated_at,
                        actor="sim", action="promote", reason="", binding=record.binding)


def rollout(world: World, p: float, rng: random.Random, rule: Rule | None = None,
            literal: bool = False) -> Outcome:
    """Walk one rollout run by run until it is rolled back, stable, or paused.

    `rule`: a stand-in for decide(), read at every read. `literal`: the gatekeeper's
    view built afresh at every read (the reference the event-driven reader matches).
    """
    record = _start(world.policy, world.holdback)
    ledger = Ledger(record, world.carry)
    history = History(rng, world.base, world.history)
    traffic = Traffic(world, p)
    traffic.enter(Stage.SHADOW, 0.0)
    if rule is gatekeeper_rule:
        rule, literal = None, True
    state = _Walk(world, traffic, rng, history, literal)
    ends: list[float] = []
    while True:
        carried = history.window()
        counts = StageCounts(
            carried=carried, carried_n=carried.n, carried_passes=carried.passes,
            rollout=ledger.rollout(record), concurrent=world.concurrent, literal=literal,
            reports=None if world.reports is None else Reports(),
            criteria=Criteria(len(world.criteria)) if world.criteria else None)
        reader = Reader(record, counts, rule)
        action, now = state.stage(record, counts, reader)
        ends.append(now)
        binding = record.binding

        def end(rolled_back: bool, stage: str, reason: str = reader.reason) -> Outcome:
            return Outcome(rolled_back, state.runs, state.served, stage, tuple(ends), reason)

        if not isinstance(action, Action):
            return end(False, action)
        if action is Action.ROLLBACK:
            return end(True, binding.stage.value)
        moved = apply(binding, Event.ADVANCE, now).binding
        if moved.stage is Stage.STABLE:
            return end(False, "stable")
        ended, record = record, record.model_copy(
            update={"binding": moved, "version": record.version + 1, "updated_at": now})
        ledger.advance(ended, counts, record)
        traffic.enter(moved.stage, now)


class _Walk:
    """The traffic loop: job after job into the stage's counts, a read after each run or
    on the schedule, until a read advances, rolls back or pauses."""

    def __init__(self, world: World, traffic: Traffic, rng: random.Random,
                 history: History, literal: bool) -> None:
        self.world, self.traffic, self.rng = world, traffic, rng
        self.history, self.literal = history, literal
        self.job = 0
        self.runs = self.served = 0
        self.next_read = 1

    def stage(self, record: VersionedBinding, counts: StageCounts,
              reader: Reader) -> tuple[Action | str, float]:
        """Run jobs through `record`'s stage: (ADVANCE or ROLLBACK, or "paused" or
        "undecided"; when)."""
        world, rng, history, literal = self.world, self.rng, self.history, self.literal
        rand = rng.random
        binding = record.binding
        shadow = binding.stage is Stage.SHADOW
        share = (1.0 - binding.holdback) if binding.stage is Stage.FULL else binding.share
        dt = 1.0 / world.rate
        rho, te = world.rho, world.tool_error
        traffic = self.traffic
        tenants, cumulative = traffic.tenants, traffic.cumulative
        last_tenant = len(tenants) - 1
        rule_tenant = None if shadow else world.rule_tenant
        shock = world.shock
        shock_from, shock_to = traffic.window()
        rep_cur, rep_cand = world.reports or (1.0, 1.0)
        reports, criteria = counts.reports, counts.criteria
        keys = world.criteria
        bucket_s = concurrent.BUCKET_S
        buckets = counts.buckets
        last_bucket: int | None = None
        strata: dict[str, list[int]] = {}
        # The candidate's stream, for its drift detector's figures (the literal view's).
        keep_entries = not world.concurrent or literal
        every_run, interval = world.every_run, world.interval
        read = reader.read
        horizon = world.horizon_s
        while True:
            self.job += 1
            t = self.job * dt
            if t > horizon:
                return "undecided", t
            tenant = 0 if not last_tenant else min(bisect.bisect_right(cumulative, rand()),
                                                    last_tenant)
            found = tenants[tenant]
            base, p_cand, outage = found.current, found.candidate, False
            if shock is not None and shock_from <= t < shock_to:
                if shock.outage:
                    base, p_cand, outage = 0.0, 0.0, True
                else:
                    base, p_cand = max(0.0, base - shock.drop), max(0.0, p_cand - shock.drop)
            bucket = int(t // bucket_s)
            if bucket != last_bucket and not literal:
                strata = {}
                buckets.append([bucket, strata])
                if reports is not None:
                    counts.raw.append([bucket, strata])
                last_bucket = bucket
            ran_current = ran_candidate = False
            if shadow:
                shared = rand()
                u_current = shared if rand() < rho else rand()
                u_candidate = shared if rand() < rho else rand()
                ok_current, ok = u_current < base, u_candidate < p_cand
                ran_current = ran_candidate = True
                stratum = ""
            else:
                ruled = rule_tenant is not None and tenant == rule_tenant
                if ruled or rand() < share:
                    ok = rand() < p_cand
                    ran_candidate = True
                    self.served += 1
                    stratum = "rule" if ruled else ""
                else:
                    ok_current = rand() < base
                    ran_current = True
            if ran_candidate:
                self.runs += 1
                got = rep_cand >= 1.0 or rand() < rep_cand
                if reports is not None:
                    # `mature_before` with no grace: the bucket by the report module's size.
                    _count(reports.candidate, report_bucket(t, 0.0), got)
                if got:
                    error = outage or (te > 0.0 and rand() < te)
                    counts.cand_n += 1
                    counts.cand_passes += ok
                    counts.recent.append(ok)
                    if keep_entries:
                        counts.entries.append((f"{self.job}-0", PASS if ok else FAIL))
                    if literal:
                        counts.cell("candidate", t, stratum, ok, error)
                    else:
                        cell = strata.get(stratum) or strata.setdefault(stratum, [0] * 6)
                        cell[CN] += 1
                        cell[CF] += not ok
                        cell[CE] += error
                else:
                    ran_candidate = False
            if ran_current:
                got = rep_cur >= 1.0 or rand() < rep_cur
                if reports is not None:
                    _count(reports.current, report_bucket(t, 0.0), got)
                if got:
                    error = outage or (te > 0.0 and rand() < te)
                    counts.cur_n += 1
                    counts.cur_passes += ok_current
                    history.add(ok_current)
                    if literal:
                        counts.cell("current", t, "", ok_current, error)
                    else:
                        cell = strata.get("") or strata.setdefault("", [0] * 6)
                        cell[KN] += 1
                        cell[KF] += not ok_current
                        cell[KE] += error
                else:
                    ran_current = False
            if shadow and ran_current and ran_candidate:
                counts.pairs += 1
                counts.regressions += ok_current and not ok
                counts.improvements += ok and not ok_current
            if criteria is not None:
                if shadow and ran_current and ran_candidate:
                    mask_current, mask_cand = _paired_masks(rand, keys, rho)
                    criteria.add(1, mask_current)
                    criteria.add(0, mask_cand)
                    criteria.pair(mask_current, mask_cand)
                else:
                    if ran_candidate:
                        criteria.add(0, _mask(rand, keys, 1))
                    if ran_current:
                        criteria.add(1, _mask(rand, keys, 0))
            if every_run:
                action, paused = read(t)
                if paused:
                    return "paused", t
                if action is Action.ROLLBACK or action is Action.ADVANCE:
                    return action, t
                continue
            while self.next_read * interval < t + dt:
                now = self.next_read * interval
                self.next_read += 1
                action, paused = read(now)
                if paused:
                    return "paused", now
                if action is Action.ROLLBACK or action is Action.ADVANCE:
                    return action, now


def _count(arm: tuple[dict[int, int], dict[int, int]], bucket: int, reported: bool) -> None:
    """One assigned run in `bucket`, and its report if it arrived."""
    assigned, arrived = arm
    assigned[bucket] = assigned.get(bucket, 0) + 1
    if reported:
        arrived[bucket] = arrived.get(bucket, 0) + 1


def _mask(rand: Callable[[], float], keys: tuple[tuple[float, float], ...], arm: int) -> int:
    """One run's criterion results: bit k set when it passed key k (arm 0 current, 1 candidate)."""
    mask = 0
    for k, rates in enumerate(keys):
        if rand() < rates[arm]:
            mask |= 1 << k
    return mask


def _paired_masks(rand: Callable[[], float], keys: tuple[tuple[float, float], ...],
                  rho: float) -> tuple[int, int]:
    """Both arms' results on one shadow job, sharing randomness as their outcomes do."""
    current = candidate = 0
    for k, (p_current, p_cand) in enumerate(keys):
        shared = rand()
        if (shared if rand() < rho else rand()) < p_current:
            current |= 1 << k
        if (shared if rand() < rho else rand()) < p_cand:
            candidate |= 1 << k
    return current, candidate


#: The pieces other modules drive directly.
__all__ = ["Outcome", "Rule", "Shock", "Tenant", "Traffic", "World", "gatekeeper_rule",
           "plain_rule", "rollout"]
