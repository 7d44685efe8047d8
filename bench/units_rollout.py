"""One simulated canary stage judged as the gatekeeper judges it: decide() on the whole gate view.

The world (`bench.units_world`) makes the runs; each is stored as the router's
ingest stores it at its report's arrival (`bench.units_gate.GateState`: the
window increments with the cells filed by start, the unit facts, the exposure
counted at its resolve). The gatekeeper ticks every `UnitWorld.tick` seconds of
simulated time (5 s, the shipped `rolegate gatekeeper --interval`; the end-to-end
tests tick every 0.5 s, `--tick 0.5`) and at each tick decide() runs on the gate
view built as the router builds it (`GateState.decide`); a rollback is what
decide() answers, whichever rule gave it.

Reading the whole view at every tick of a 900 s stage would cost some 1,800
builds a rollout; decide() is pure, so a tick calls it only when something it
can act on has changed since the last call (`key`), and otherwise answers what
it answered then. Before the stage's minimum only a rollback or a hold can come
out, and a rollback only through the unit test's verdict and whether keys
repeat, the concurrent section (its closed bucket, and any run landing in a
closed cell), the reports section (its matured bucket, and any report landing in
a matured one) or a zero-tolerance reason (none here: the runs call no tool);
from the minimum on, every tick with a new report calls it. `UnitWorld.literal`
calls it at every tick; tests/test_units_sim.py holds both to the same outcome.

The unit test inside the view is `unit_test` at the tick, computed afresh
only when what it counts changed (the events before its horizon, the horizon
moving back, an event landing inside it), or when enough new candidate events
could have brought it to its threshold (`max_step`).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import math
import random

from bench.units_gate import GateState, units_section
from bench.units_world import (
    ARMS,
    FAILED,
    HEALTHY_TAU,
    PASSED,
    STAMPS,
    Arm,
    Msprt,
    Outcome,
    Run,
    UnitWorld,
    max_step,
    runs_of,
)
from bindings.models import Binding
from gatekeeper.machine.decide import Action, required_seconds
from gatekeeper.stats.concurrent import bucket_of, horizon_before, report_horizon
from gatekeeper.stats.missing import REPORT_BUCKET_S, cell_bucket, mature_before
from gatekeeper.stats.units import (
    Stretch,
    UnitVerdict,
    lag_bucket,
    lag_quantile,
    repeats_of,
    unit_test,
)
from gatekeeper.stats.units import (
    report_horizon as unit_horizon,
)
from gatekeeper.store.unit_events import unit_facts
from gatekeeper.view.reports import SILENT_GRACES
from gatekeeper.view.units import LIMIT_QUANTILE, LIMIT_RUNS, _quantile
from gatekeeper.window import cost_bucket
from rolegate.trace import Trace

#: Ticks go on this long after the last report, so its cells close and are read.
TAIL_S = 300.0


@dataclasses.dataclass
class Units:
    """The unit facts folded as UNITS_LUA folds them, and the unit test read from them."""

    world: UnitWorld
    alpha: float
    arms: dict[str, Arm] = dataclasses.field(
        default_factory=lambda: {arm: Arm() for arm in ARMS})
    seen: set[str] = dataclasses.field(default_factory=set)
    limits: dict[str, int] = dataclasses.field(default_factory=dict)
    event_seconds: list[int] = dataclasses.field(default_factory=list)
    cand_seconds: list[int] = dataclasses.field(default_factory=list)
    #: (horizon, events counted, candidate events counted, log e) at the last read.
    last: tuple[float, int, int, float] | None = None
    dirty: bool = False
    verdict: UnitVerdict | None = None
    evaluations: int = 0
    binding: Binding = dataclasses.field(init=False)
    #: (whether keys repeat, why) and the horizon's wait, as of the last new report.
    repeats: tuple[bool, str] | None = None
    wait: float | None = None

    def __post_init__(self) -> None:
        self.binding = self.world.binding()

    def add(self, run: Run, trace: Trace, facts_now: float) -> None:
        """One run's report, folded as the ingest script folds its unit line."""
        facts = unit_facts(self.binding, trace, FAILED if run.failed else PASSED, facts_now)
        if facts is None:
            return
        arm = self.arms[run.arm]
        arm.runs += 1
        arm.lags[facts.lag_bucket] += 1
        arm.units.add(facts.unit)
        metrics = list(facts.metrics)
        limits = self.limits
        if ("slow_ms" in limits and facts.start_second >= limits["from_s"]
                and facts.latency_ms > limits["slow_ms"]):
            metrics.append("slow")
        for metric in metrics:
            arm.event_runs[metric] += 1
            name = f"{metric}|{facts.unit}"
            if name not in self.seen:
                self.seen.add(name)
                events = arm.events[metric]
                events[facts.start_second] = events.get(facts.start_second, 0) + 1
                bisect.insort(self.event_seconds, facts.start_second)
                if run.arm == "candidate":
                    bisect.insort(self.cand_seconds, facts.start_second)
                if self.last is not None and facts.start_second + 1 <= self.last[0]:
                    self.dirty = True  # an event inside what the last read counted
        if run.arm == "current":
            arm.latencies[cost_bucket(round(run.duration * 1000)) / 1000] += 1

    def fix_limits(self, now: float) -> None:
        """`view.units._fixed_limits` at a read: once current has LIMIT_RUNS runs."""
        if not self.limits and self.arms["current"].runs >= LIMIT_RUNS:
            self.limits["slow_ms"] = round(
                _quantile(self.arms["current"].latencies, LIMIT_QUANTILE) * 1000)
            self.limits["from_s"] = int(now) + 1

    def read(self, now: float, stretches: list[Stretch], step: float,
             fresh: bool) -> UnitVerdict:
        """The unit test at `now` (recomputed only when it could differ); `fresh`: reports
        arrived since the last read."""
        threshold = math.log(1.0 / self.alpha)
        arms = self.arms
        if fresh or self.repeats is None:
            self.repeats = repeats_of({a: arms[a].view() for a in ARMS})
            # The horizon is `now` less a wait that moves only with new reports.
            found = unit_horizon({a: arms[a].lags for a in ARMS}, 0.0)
            self.wait = None if found is None else -found
        repeats, why = self.repeats
        horizon = None if self.wait is None else now - self.wait
        verdict = self.verdict
        if horizon is not None and verdict is not None and self.last is not None:
            counted = bisect.bisect_right(self.event_seconds, horizon - 1.0)
            cand = bisect.bisect_right(self.cand_seconds, horizon - 1.0)
            last = self.last
            if not self.dirty and horizon >= last[0] and not self.world.literal and (
                    counted == last[1] or (cand - last[2]) * step < threshold - last[3]):
                # Only events after those the last read counted were added (the horizon
                # did not move back, nothing landed inside it): none, or too few of the
                # candidate's to reach the threshold (a current event never raises it).
                return _with(verdict, repeats, why)
        if horizon is None and verdict is not None and verdict.horizon is None:
            return _with(verdict, repeats, why)
        verdict = unit_test(arms["candidate"].view(), arms["current"].view(), stretches, now,
                            self.alpha)
        self.evaluations += 1
        self.verdict, self.dirty = verdict, False
        if horizon is not None:
            self.last = (horizon, bisect.bisect_right(self.event_seconds, horizon - 1.0),
                         bisect.bisect_right(self.cand_seconds, horizon - 1.0), verdict.log_e)
        return verdict


def _with(verdict: UnitVerdict, repeats: bool, why: str) -> UnitVerdict:
    """`verdict` with whether keys repeat now (which moves with every run)."""
    if verdict.repeats == repeats and verdict.repeats_why == why:
        return verdict
    return dataclasses.replace(verdict, repeats=repeats, repeats_why=why)


def _waiting(assigned: dict[str, dict[int, int]], reported: dict[str, dict[int, int]],
             mature: int) -> int | None:
    """`missing.missing_of(...).waiting_from` (the first cell a report bucket still in its
    grace with runs unreported makes wait), over those buckets alone: the key's part."""
    waiting = None
    for arm in ARMS:
        given, got = assigned[arm], reported[arm]
        for bucket in range(mature, max(given, default=mature - 1) + 1):
            n = given.get(bucket, 0)
            if not n:
                continue
            later = got.get(bucket + 1, 0) - given.get(bucket + 1, 0)
            if n - got.get(bucket, 0) - max(0, later) > 0:
                cell = cell_bucket(bucket)
                waiting = cell if waiting is None else min(waiting, cell)
                break
    return waiting


def rollout(world: UnitWorld, rnd: random.Random) -> Outcome:
    """Run one canary stage, decide() on the gate view at every tick that could change it."""
    binding = world.binding()
    alpha = binding.gate.thresholds.alpha
    stretches = [Stretch(0.0, world.share)]
    state = GateState(binding)
    units = Units(world, alpha)
    cand_fail = world.fail if world.cand_fail is None else world.cand_fail
    msprt = Msprt(abs(cand_fail - world.fail) or HEALTHY_TAU, alpha)
    step = max_step(world.share)
    minimum = required_seconds(binding)
    grace = binding.gate.reports.grace_seconds
    resolves: list[tuple[float, str]] = []
    cand_starts: list[float] = []
    runs = runs_of(world, rnd, cand_starts, resolves)
    upcoming = next(runs, None)
    # What the concurrent section's closing reads, kept as the windows keep it.
    lags: dict[str, dict[int, int]] = {arm: {} for arm in ARMS}
    judged = dict.fromkeys(ARMS, 0)
    reported: dict[str, dict[int, int]] = {arm: {} for arm in ARMS}
    first_bucket: int | None = None
    late_cells = late_reports = 0
    before = mature = -math.inf
    last_key: tuple[object, ...] | None = None
    decision_reason = ""
    theirs: float | None = None
    ours: float | None = None
    last_arrival = 0.0
    index = last_index = 0
    upto = 0
    cells_wait: float | None = None
    reports_wait = SILENT_GRACES * grace
    last_bounds: tuple[float, float] | None = None
    tick = 0
    while True:
        tick += 1
        now = tick * world.tick
        if upcoming is None and now > last_arrival + TAIL_S:
            break
        while upcoming is not None and upcoming.arrival <= now:
            run = upcoming
            index += 1
            trace = _trace(world, run, index)
            state.reported(trace, FAILED if run.failed else PASSED, run.arrival)
            units.add(run, trace, run.arrival)
            start = trace.time - trace.latency_s  # type: ignore[operator]
            lag = lag_bucket(run.arrival - start)
            lags[run.arm][lag] = lags[run.arm].get(lag, 0) + 1
            judged[run.arm] += 1
            cell = bucket_of(start)
            first_bucket = cell if first_bucket is None else min(first_bucket, cell)
            late_cells += cell < before
            bucket = int(start // REPORT_BUCKET_S)
            late_reports += bucket < mature
            reported[run.arm][bucket] = reported[run.arm].get(bucket, 0) + 1
            if theirs is None and msprt.add(run.arm, run.failed):
                theirs = run.arrival
            last_arrival = run.arrival
            upcoming = next(runs, None)
        fresh = index != last_index
        moved = fresh
        while resolves and resolves[0][0] <= now:
            when, arm = heapq.heappop(resolves)
            state.resolved(arm, when)
            moved = True
        units.fix_limits(now)
        verdict = units.read(now, stretches, step, fresh)
        if fresh:
            # The cells' horizon is `now` less a wait that moves only with new reports, and
            # so is the report buckets' (`view.reports.report_wait`, over the same lags).
            found = report_horizon(0.0, [(judged[a], lags[a]) for a in ("candidate", "current")])
            cells_wait = None if found is None else -found
            reports_wait = max(grace, *(
                q if (q := lag_quantile(lags[a]) if lags[a] else None) is not None
                else SILENT_GRACES * grace for a in ARMS))
        horizon = None if cells_wait is None else now - cells_wait
        before = horizon_before(horizon, bucket_of(now) if first_bucket is None
                                else min(first_bucket, bucket_of(now)))
        mature = mature_before(now, reports_wait)
        # The cells the run-failure metric counts stop at the first one a run in flight
        # makes wait (`missing.Missing.counted_before`): it moves with reports and resolves.
        if moved or (before, mature) != last_bounds:
            waiting = _waiting(state.assigned, reported, mature)
            upto = before if waiting is None else min(before, waiting)
            last_bounds = (before, mature)
        last_index = index
        ripe = now >= minimum
        key = (verdict.reject, verdict.repeats, before, upto, late_cells, mature, late_reports,
               ripe,
               (judged["candidate"], judged["current"]) if ripe else None)
        if key == last_key and not world.literal:
            continue
        last_key = key
        made = state.decide(now, units_section(verdict, stretches))
        if made.action is Action.ROLLBACK:
            ours, decision_reason = now, made.reason
            break
        if made.action is Action.ADVANCE:
            break
    while theirs is None and upcoming is not None:
        # The mSPRT's own verdict on the same reports, read after every one of them.
        if msprt.add(upcoming.arm, upcoming.failed):
            theirs = upcoming.arrival
        upcoming = next(runs, None)
    cand_starts.sort()
    first = cand_starts[0] if cand_starts else 0.0

    def started(at: float | None) -> int:
        return len(cand_starts) if at is None else bisect.bisect_right(cand_starts, at)

    return Outcome(ours is not None, (ours - first) if ours is not None else math.inf,
                   started(ours), theirs is not None,
                   (theirs - first) if theirs is not None else math.inf,
                   started(theirs), state.reads, decision_reason)


#: A validated trace of each arm: a run's is its copy with the run's own fields (what
#: validation would give them: they are plain numbers and names).
TEMPLATES = {arm: Trace.model_validate({
    "run_id": "run-0", "role": "sim", "config": "cfg-b" if arm == "candidate" else "cfg-a",
    "arm": arm, "key": "k", "stamps": STAMPS, "time": 1.0, "latency_s": 1.0}) for arm in ARMS}


def _trace(world: UnitWorld, run: Run, index: int) -> Trace:
    """The run's trace as the agent reports it (time = its end, latency_s = its length)."""
    return TEMPLATES[run.arm].model_copy(update={
        "run_id": f"run-{index}", "key": run.key,
        "time": run.start + run.duration if world.report_latency else run.start,
        "latency_s": run.duration if world.report_latency else 0.0})
