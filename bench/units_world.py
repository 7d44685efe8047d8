"""The agents' world of issues 34 and 35: the runs a simulated canary stage gets.

A world sends jobs at `rate` a second for `seconds`; each job's unit (a fresh
key, or one of `keys` customers drawn with Zipf volumes and a difficulty of
their own on the logit scale) is on the candidate with chance `share`, drawn
once per unit (sticky, as the router's hash is). A job starts `gap` seconds
after its resolve, runs `duration` seconds (the candidate `extra` more), and
its report arrives `delay` seconds after it ends (each arm its own extra
delay). A failed run may be retried under its key (`retries`, 1 s after it
ends). An outage fails every run that *starts* inside it, on both arms.

`bench.units_rollout` stores every run as the router does and has decide()
judge the whole gate view at every gatekeeper tick. `Arm` is one arm's unit
facts as the ingest script folds them (runs, the lag histogram, distinct units,
slow/costly against the rollout's limits, HSETNX of each unit's first event per
metric); `Msprt` is the run-level yardstick read beside it.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import NamedTuple

from bindings.models import Binding, GatePolicy, Thresholds
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.stats.units import RISKS, ArmUnits

STAMPS = {"agent_version": "a", "instruction_hash": "i", "model_id": "m",
          "tool_schema_hash": "t"}
PASSED, FAILED = TraceVerdict(passed=True), TraceVerdict(passed=False)
ARMS = ("candidate", "current")
ZIPF = 1.1
RETRY_BACKOFF_S = 1.0
HEALTHY_TAU = 0.05


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def icc_sd(icc: float) -> float:
    """The sd of a unit's logit difficulty giving intra-key correlation `icc` (latent scale)."""
    return math.sqrt(icc / (1.0 - icc) * math.pi ** 2 / 3.0) if icc > 0 else 0.0


@dataclass(frozen=True)
class UnitWorld:
    """The traffic of one row (see the module docstring); the candidate fails at `cand_fail`."""

    rate: float = 5.0
    share: float = 0.5
    seconds: float = 1800.0
    fail: float = 0.05
    cand_fail: float | None = None
    keys: int | None = None
    icc: float = 0.0
    retries: int = 0
    outage: tuple[float, float] | None = None
    duration: tuple[float, float] = (1.0, 3.0)
    extra: tuple[float, float] = (0.0, 0.0)
    delay: tuple[float, float] = (0.0, 0.5)
    cand_delay: float = 0.0
    cur_delay: float = 0.0
    gap: tuple[float, float] = (0.0, 0.0)
    #: The policy's max_p95_latency_increase (None: the shipped default).
    latency_tolerance: float | None = None
    #: False: runs report no latency (latency_s 0, time = their start), so no `slow` events.
    report_latency: bool = True
    #: Stop at this many candidate runs started (a drop row's cap), else at `seconds`.
    cap_runs: int | None = None
    #: Call decide() at every gatekeeper tick (no skipping; for tests).
    literal: bool = False
    #: Seconds between the gatekeeper's ticks (`rolegate gatekeeper --interval`, 5 by default).
    tick: float = 5.0

    def binding(self) -> Binding:
        """The canary binding every run is filed under (the shipped gate, alpha 0.0025)."""
        thresholds = Thresholds()
        if self.latency_tolerance is not None:
            thresholds = thresholds.model_copy(
                update={"max_p95_latency_increase": self.latency_tolerance})
        return Binding(current="cfg-a", candidate="cfg-b", stage="canary", share=self.share,
                       stage_since=0.0, gate=GatePolicy(thresholds=thresholds))


class Run(NamedTuple):
    """One run: when its report arrives, its start, duration, arm, unit name, whether it
    failed, and when it was resolved."""

    arrival: float
    start: float
    duration: float
    arm: str
    key: str
    failed: bool
    resolved: float = 0.0


def runs_of(world: UnitWorld, rnd: random.Random, cand_starts: list[float] | None = None,
            resolves: list[tuple[float, str]] | None = None) -> Iterator[Run]:
    """Every run of the rollout (retries included), in report-arrival order, made as
    they are needed (a drop row stops at its rollback); each candidate run's start is
    added to `cand_starts` when it is made, and each run's (resolve, arm) pushed on the
    heap `resolves`, before any report that arrives after it (a retry is made with its
    job: before any report that arrives after the job's first resolve)."""
    pending: list[Run] = []
    for resolved, runs in _jobs(world, rnd):
        # Every later job starts, so reports, after `resolved`.
        while pending and pending[0].arrival <= resolved:
            yield heapq.heappop(pending)
        for run in runs:
            heapq.heappush(pending, run)
            if cand_starts is not None and run.arm == "candidate":
                cand_starts.append(run.start)
            if resolves is not None:
                heapq.heappush(resolves, (run.resolved, run.arm))
    while pending:
        yield heapq.heappop(pending)


def _jobs(world: UnitWorld, rnd: random.Random) -> Iterator[tuple[float, list[Run]]]:
    """Each job's resolve time and runs (its retries included), in resolve order."""
    keys = world.keys or 0
    cumulative = list(accumulate(1.0 / (k + 1) ** ZIPF for k in range(keys)))
    units = range(keys)
    sd = icc_sd(world.icc)
    difficulty = [rnd.gauss(0.0, sd) for _ in range(keys)]
    on_candidate = [rnd.random() < world.share for _ in range(keys)]
    cand_fail = world.fail if world.cand_fail is None else world.cand_fail
    t, job, cand_runs = 0.0, 0, 0
    while True:
        t += rnd.expovariate(world.rate)
        if t >= world.seconds or (world.cap_runs is not None and cand_runs >= world.cap_runs):
            break
        job += 1
        if keys:
            unit = rnd.choices(units, cum_weights=cumulative)[0]
            key, hard, candidate = f"customer-{unit}", difficulty[unit], on_candidate[unit]
        else:
            key, hard, candidate = f"job-{job}", 0.0, rnd.random() < world.share
        rate = cand_fail if candidate else world.fail
        arm = "candidate" if candidate else "current"
        resolved = t
        runs: list[Run] = []
        for _ in range(world.retries + 1):
            start = resolved + rnd.uniform(*world.gap)
            duration = rnd.uniform(*world.duration)
            if candidate:
                duration += rnd.uniform(*world.extra)
                cand_runs += 1
            if rate >= 1.0:
                failed = True
            elif rate <= 0.0:
                failed = False
            else:
                failed = rnd.random() < 1.0 / (1.0 + math.exp(-(logit(rate) + hard)))
            if world.outage is not None and world.outage[0] <= start < world.outage[1]:
                failed = True
            end = start + duration
            late = world.cand_delay if candidate else world.cur_delay
            runs.append(Run(end + rnd.uniform(*world.delay) + late, start, duration, arm, key,
                            failed, resolved))
            if not failed:
                break
            resolved = end + RETRY_BACKOFF_S
        yield t, runs


@dataclass
class Arm:
    """One arm's folded unit facts, as the arm hash and HLL in Redis hold them."""

    events: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    event_runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    runs: int = 0
    units: set[str] = field(default_factory=set)
    lags: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    latencies: dict[float, int] = field(default_factory=lambda: defaultdict(int))

    def view(self) -> ArmUnits:
        return ArmUnits(self.events, self.event_runs, self.runs, len(self.units), self.lags)


@dataclass(frozen=True)
class Outcome:
    """A rollout's end: rolled back or not, when, after how many candidate runs (both readers)."""

    rolled_back: bool
    seconds: float
    runs: int
    msprt_back: bool
    msprt_seconds: float
    msprt_runs: int
    evaluations: int
    reason: str = ""


class Msprt:
    """Johari et al.'s two-sample mixture SPRT on the failure rate, read after every report.

    Normal mixture of variance tau^2 over the difference (oracle-tuned: tau = the
    true difference), one-sided (the candidate failing more), pooled variance,
    rejecting at Lambda >= 1/alpha.
    """

    def __init__(self, tau: float, alpha: float) -> None:
        self.tau2 = max(tau, 1e-3) ** 2
        self.bar = math.log(1.0 / alpha)
        self.n = {arm: 0 for arm in ARMS}
        self.f = {arm: 0 for arm in ARMS}

    def add(self, arm: str, failed: bool) -> bool:
        """Count one report; True once the test rejects."""
        self.n[arm] += 1
        self.f[arm] += failed
        n1, n0 = self.n["candidate"], self.n["current"]
        if n1 < 1 or n0 < 1:
            return False
        diff = self.f["candidate"] / n1 - self.f["current"] / n0
        if diff <= 0:
            return False
        pooled = (self.f["candidate"] + self.f["current"] + 0.5) / (n1 + n0 + 1.0)
        v = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n0)
        log_lambda = (0.5 * math.log(v / (v + self.tau2))
                      + self.tau2 * diff * diff / (2.0 * v * (v + self.tau2)))
        return log_lambda >= self.bar


def max_step(share: float) -> float:
    """The most one event can raise the unit test's log e-value at `share`.

    Each metric's e-value averages likelihood ratios at relative risks up to
    RISKS[-1] (the plug-in bettor's risk is capped there too), and a candidate
    event multiplies each by at most q/share, q the candidate's chance at that risk.
    """
    top = RISKS[-1]
    q = share * top / (share * top + 1.0 - share)
    return math.log(q / share)
