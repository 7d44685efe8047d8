"""One simulated rollout through the code the gate view and the gatekeeper run.

No HTTP, no Redis, but no shortcut through the statistics either: at every
gatekeeper tick the view is built by the functions `gatekeeper.view` builds it
with (`gate.evaluate(...).to_json()` per arm, the paired tally's `report` at
`budget.final_alpha`, p0 from current's stage runs merged with its carried
history through `drift.params_for` (upper bound, derived h), the candidate's
`drift.Detector` advanced over the stage's runs and restarted when `outdated`,
`drift.section`), read back by `decide.evidence_from_view` and judged by
`decide.decide`; an advance goes through `stages.apply` and is written to the
rollout's history, from which `rollout.walk` finds the earlier stages whose
counts the view's `rollout` section carries (`rollout.carried_of`, `as_dict`). What is simulated is
only the traffic: jobs arrive at `rate` a second, the gatekeeper reads every
`interval` seconds, current passes at `base`, the candidate at `p`, and in
shadow the two arms' outcomes on one job share their randomness with
probability `rho` each.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bindings.models import (
    DEFAULT_HOLDBACK,
    Binding,
    GatePolicy,
    HistoryEntry,
    Stage,
    VersionedBinding,
)
from gatekeeper.gate import evaluate
from gatekeeper.machine.decide import (
    Action,
    decide,
    evidence_from_view,
    required_seconds,
    shadow_pairs_needed,
)
from gatekeeper.machine.stages import Event, apply
from gatekeeper.stats.budget import final_alpha
from gatekeeper.stats.concurrent import Comparison, bucket_of, cells_of, closed_before
from gatekeeper.stats.drift import RUN_FAILURE, TOOL_ERROR, Detector, params_for, section
from gatekeeper.stats.pair_tally import Tally
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.rollout import Carried, EarlierStage, carried_of, epoch_key, walk
from gatekeeper.store.history import HISTORY_RUNS
from gatekeeper.view.concurrent import section_of
from gatekeeper.window import CELL_EVENTS, CELL_N, WindowStats

PASS = Run("", True)
FAIL = Run("", False)


@dataclass(frozen=True)
class World:
    """The traffic and the policy one rollout runs under."""

    base: float
    policy: GatePolicy
    rate: float = 1.0
    interval: float = 5.0
    rho: float = 0.5
    #: Current runs before the rollout (its stable history the view carries).
    history: int = HISTORY_RUNS
    #: False: the view has no `rollout` section, so each stage's tests start afresh
    #: at the stage alpha (the gate before evidence was carried across stages).
    carry: bool = True
    #: False: the view has no `concurrent` section (the gate before issue 23: the
    #: candidate against current's p0, its CUSUM against that p0).
    concurrent: bool = True
    #: Tenants (weight, current's pass rate, the candidate's); None: one, at (base, p).
    tenants: tuple[Tenant, ...] | None = None
    #: A targeting rule sends this tenant (an index) to the candidate in canary and full.
    rule_tenant: int | None = None
    #: Something that happens to both arms (an outage, the provider's model changing).
    shock: Shock | None = None
    #: Chance a run has a tool error (both arms; every run in an outage).
    tool_error: float = 0.0
    #: The binding's holdback on current in `full`.
    holdback: float = DEFAULT_HOLDBACK


@dataclass(frozen=True)
class Tenant:
    """A population of jobs: its share of the traffic and each arm's pass rate on it."""

    weight: float
    current: float
    candidate: float


@dataclass(frozen=True)
class Shock:
    """From `after_s` into the first `stage` the rollout enters, for `duration_s`: every
    run of both arms fails (`outage`), or both arms' pass rates fall by `drop`."""

    stage: str
    after_s: float
    duration_s: float = math.inf
    outage: bool = False
    drop: float = 0.0


@dataclass(frozen=True)
class Outcome:
    """One rollout: rolled back or not, candidate runs and served jobs before the end."""

    rolled_back: bool
    runs: int
    served: int
    stage: str


@dataclass
class StageCounts:
    """What the stores would hold for the stage so far."""

    cand_n: int = 0
    cand_passes: int = 0
    cur_n: int = 0
    cur_passes: int = 0
    pairs: int = 0
    regressions: int = 0
    improvements: int = 0
    entries: list[tuple[str, Run]] = field(default_factory=list)
    detector: Detector | None = None
    #: Counts of current's carried history at the stage's start.
    carried: WindowStats = field(default_factory=WindowStats)
    #: The rollout's earlier stages, as the view's `rollout` section shows them.
    rollout: Carried | None = None
    #: The cell fields of each arm's window (`window.increments` writes them).
    cand_cells: WindowStats = field(default_factory=WindowStats)
    cur_cells: WindowStats = field(default_factory=WindowStats)
    #: The concurrent section, kept while no bucket closed since (it cannot change).
    section: tuple[int, dict[str, Any]] | None = None
    #: False: the view has no `concurrent` section (`World.concurrent`).
    concurrent: bool = True

    def cell(self, arm: str, time: float, stratum: str, passed: bool, error: bool) -> None:
        """Count one run in its (bucket, stratum) cell, as ingest's increments do."""
        fields = (self.cand_cells if arm == "candidate" else self.cur_cells).fields
        cell = f"{bucket_of(time)}:{stratum}"
        fields[CELL_N + cell] += 1
        if not passed:
            fields[CELL_EVENTS[RUN_FAILURE] + cell] += 1
        if error:
            fields[CELL_EVENTS[TOOL_ERROR] + cell] += 1


def _job(rng: random.Random, base: float, p: float, rho: float) -> tuple[bool, bool]:
    shared = rng.random()
    u_current = shared if rng.random() < rho else rng.random()
    u_candidate = shared if rng.random() < rho else rng.random()
    return u_current < base, u_candidate < p


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


_ARMS: dict[tuple[int, int, int], dict[str, Any]] = {}
#: Policies seen by _arm_json, kept alive so their ids stay theirs.
_POLICIES: dict[int, GatePolicy] = {}


def _arm_json(n: int, passes: int, policy: GatePolicy) -> dict[str, Any]:
    """`gate.evaluate(...).to_json()` of an arm's counts (memoized: the same counts recur
    across rollouts, and evaluate is pure)."""
    key = (n, passes, id(policy))
    found = _ARMS.get(key)
    if found is None:
        _POLICIES[id(policy)] = policy
        if len(_ARMS) > 500_000:
            _ARMS.clear()
        found = _ARMS[key] = evaluate(WindowStats({"n": n, "passes": passes}), policy).to_json()
    return found


_PAIRS: dict[tuple[int, int, int, float, int], dict[str, Any]] = {}


def _paired_json(pairs: int, regressions: int, improvements: int, alpha: float,
                 needed: int) -> dict[str, Any]:
    """The paired tally's report of those counts (memoized, pure)."""
    key = (pairs, regressions, improvements, alpha, needed)
    found = _PAIRS.get(key)
    if found is None:
        if len(_PAIRS) > 500_000:
            _PAIRS.clear()
        tally = Tally(pairs=pairs, regressions=regressions, improvements=improvements)
        found = _PAIRS[key] = tally.report(alpha=alpha, min_samples=needed).as_dict()
    return found


def view_of(record: VersionedBinding, counts: StageCounts, now: float) -> dict[str, object]:
    """The parts of the gate view decide() reads, built by the view's own functions."""
    binding = record.binding
    policy = binding.gate
    thresholds = policy.thresholds
    arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    current = WindowStats({"n": counts.cur_n, "passes": counts.cur_passes})
    view: dict[str, object] = {
        "stage": binding.stage.value,
        "arms": {"current": _arm_json(counts.cur_n, counts.cur_passes, policy),
                 arm: _arm_json(counts.cand_n, counts.cand_passes, policy)},
        "paired": None,
    }
    if binding.stage is Stage.SHADOW:
        view["paired"] = _paired_json(counts.pairs, counts.regressions, counts.improvements,
                                      final_alpha(thresholds.alpha, Stage.SHADOW),
                                      shadow_pairs_needed(thresholds))
    # With the concurrent section the candidate's drift detector only shows (decide()
    # rolls back on the section's tests): the simulator leaves it out.
    params = None if counts.concurrent else params_for(
        RUN_FAILURE, policy.drift, current.merge(counts.carried), thresholds.min_samples,
        thresholds.alpha)
    shown = {}
    if params is not None:
        detector = counts.detector
        if detector is None or detector.outdated(params):
            detector = Detector(RUN_FAILURE, params)
        # The store hands a detector only the entries after its last id.
        counts.detector = detector = detector.advance(counts.entries[detector.n:])
        shown = {RUN_FAILURE: detector.as_dict(True)}
    view["drift"] = section(shown, {}, policy.drift)
    if counts.concurrent:
        before = closed_before(now)
        if counts.section is None or counts.section[0] != before:
            counts.section = (before, section_of(counts.cand_cells, counts.cur_cells, binding,
                                                 now))
        view["concurrent"] = counts.section[1]
    if counts.rollout is not None:
        view["rollout"] = counts.rollout.as_dict(binding)
    return view


#: A stand-in for decide(): given the binding, the stage counts and the time, an action.
Rule = Callable[[VersionedBinding, StageCounts, float], Action]


def gatekeeper_rule(record: VersionedBinding, counts: StageCounts, now: float) -> Action:
    """What the gatekeeper does: decide() on the evidence read out of the gate view."""
    return decide("sim", record, evidence_from_view(view_of(record, counts, now)), now).action


def plain_rule(window: int) -> Rule:
    """Seed 000's check: roll back when the last `window` candidate runs pass under
    min_pass_rate; advance once the stage has min_samples runs and its time."""

    def rule(record: VersionedBinding, counts: StageCounts, now: float) -> Action:
        binding = record.binding
        thresholds = binding.gate.thresholds
        recent = counts.entries[-window:]
        if len(recent) == window and (
                sum(run.passed for _, run in recent) / window < thresholds.min_pass_rate):
            return Action.ROLLBACK
        waited = now - (binding.stage_since or 0.0)
        if counts.cand_n >= thresholds.min_samples and waited >= required_seconds(binding):
            return Action.ADVANCE
        return Action.HOLD

    return rule


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
        compared = Comparison.of(cells_of(counts.cand_cells.cells(RUN_FAILURE),
                                          counts.cur_cells.cells(RUN_FAILURE)))
        self.finished[epoch_key(binding.stage_since)] = EarlierStage(
            binding.stage, binding.share, binding.stage_since, counts.cand_n,
            counts.cand_passes, counts.regressions, counts.improvements, compared)
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


class Traffic:
    """Who a job is, and how each arm does on it at a time: tenants, the rule, the shock."""

    def __init__(self, world: World, p: float) -> None:
        self.world = world
        self.tenants = world.tenants or (Tenant(1.0, world.base, p),)
        total = sum(t.weight for t in self.tenants)
        self.cumulative = []
        acc = 0.0
        for tenant in self.tenants:
            acc += tenant.weight / total
            self.cumulative.append(acc)
        self.shock_at: float | None = None

    def enter(self, stage: Stage, now: float) -> None:
        """The rollout entered `stage` at `now`: a shock waiting for it is timed from here."""
        shock = self.world.shock
        if shock is not None and self.shock_at is None and stage.value == shock.stage:
            self.shock_at = now + shock.after_s

    def tenant(self, rng: random.Random) -> int:
        """Draw a job's tenant."""
        if len(self.tenants) == 1:
            return 0
        u = rng.random()
        return next(i for i, c in enumerate(self.cumulative) if u < c)

    def rates(self, tenant: int, time: float) -> tuple[float, float, bool]:
        """(current's pass rate, the candidate's, in an outage) for the tenant at `time`."""
        found = self.tenants[tenant]
        shock = self.world.shock
        if shock is not None and self.shock_at is not None and \
                self.shock_at <= time < self.shock_at + shock.duration_s:
            if shock.outage:
                return 0.0, 0.0, True
            return (max(0.0, found.current - shock.drop), max(0.0, found.candidate - shock.drop),
                    False)
        return found.current, found.candidate, False


def rollout(world: World, p: float, rng: random.Random,
            rule: Rule = gatekeeper_rule) -> Outcome:
    """Walk one rollout tick by tick until it is rolled back or stable."""
    record = _start(world.policy, world.holdback)
    ledger = Ledger(record, world.carry)
    history = History(rng, world.base, world.history)
    traffic = Traffic(world, p)
    traffic.enter(Stage.SHADOW, 0.0)

    def fresh() -> StageCounts:
        return StageCounts(carried=history.window(), rollout=ledger.rollout(record),
                           concurrent=world.concurrent)

    counts = fresh()
    runs = served = 0
    now = 0.0
    per_tick = world.rate * world.interval
    owed = 0.0
    seq = 0
    while True:
        binding = record.binding
        owed += per_tick
        jobs = int(owed)
        owed -= jobs
        for j in range(jobs):
            t = now + (j + 1) * world.interval / jobs
            tenant = traffic.tenant(rng)
            base, p_cand, outage = traffic.rates(tenant, t)
            error = outage or (world.tool_error > 0 and rng.random() < world.tool_error)
            if binding.stage is Stage.SHADOW:
                ok_current, ok = _job(rng, base, p_cand, world.rho)
                counts.cur_n += 1
                counts.cur_passes += ok_current
                history.add(ok_current)
                counts.cell("current", t, "", ok_current, error)
                counts.pairs += 1
                counts.regressions += ok_current and not ok
                counts.improvements += ok and not ok_current
                stratum = ""
            else:
                ruled = world.rule_tenant is not None and tenant == world.rule_tenant
                share = (1.0 - binding.holdback) if binding.stage is Stage.FULL \
                    else binding.share
                if ruled or rng.random() < share:
                    ok = rng.random() < p_cand
                    served += 1
                    stratum = "rule" if ruled else ""
                else:
                    ok_current = rng.random() < base
                    counts.cur_n += 1
                    counts.cur_passes += ok_current
                    history.add(ok_current)
                    counts.cell("current", t, "", ok_current, error)
                    continue
            runs += 1
            seq += 1
            counts.cand_n += 1
            counts.cand_passes += ok
            counts.cell("candidate", t, stratum, ok, error)
            counts.entries.append((f"{seq}-0", PASS if ok else FAIL))
        now += world.interval
        action = rule(record, counts, now)
        if action is Action.ROLLBACK:
            return Outcome(True, runs, served, binding.stage.value)
        if action is Action.ADVANCE:
            moved = apply(binding, Event.ADVANCE, now).binding
            if moved.stage is Stage.STABLE:
                return Outcome(False, runs, served, "stable")
            ended, record = record, record.model_copy(
                update={"binding": moved, "version": record.version + 1, "updated_at": now})
            ledger.advance(ended, counts, record)
            traffic.enter(moved.stage, now)
            counts = fresh()
