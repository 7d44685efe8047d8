"""Candidate against concurrent current: valid at every look, stratified, no p0 needed.

The reusable comparison for any binary outcome of a run (failed, had a tool
error, made a forbidden call; a criterion failed; a report is missing): is the
candidate's rate higher than current's **over the same minutes on the same
population**? A shift both arms see (an outage, the provider changing the model
behind a name, a harder mix of jobs) is not evidence against the candidate.

    cells = cells_of(candidate_counts, current_counts, closed_before=bucket)
    test = concurrent_test(cells, alpha)            # test.reject, test.as_dict()
    # carried over stages: Comparison.of(cells).merge(earlier).log_e()

**The cells.** Runs are counted per (time bucket, stratum) and arm: `Cell`
holds the candidate's runs and events and current's in one bucket of
`BUCKET_S` seconds of the runs' *start* (`time - latency_s`: a run is born at
its assignment, so a candidate whose runs take a minute longer meets an outage
that fails runs by when they start in the very cells current meets it) and one stratum (the targeting rule that picked the arm, ""
for a bucketed job). Only the runs of one cell are ever compared with each
other, so runs a rule sent to one arm are never pooled against another
population (a stratum only one arm serves carries no evidence: both Simpson
cases come out right), and time is matched to the bucket.

**The test** (the conditioning trick). Within a cell, given that F of its runs
had the event, under "the candidate is no worse" each of them is the
candidate's with probability at most pi = its share of the cell's runs,
whatever the common rate is: the number that are the candidate's is
hypergeometric (exactly, under random assignment; Fisher's exact test
conditions the same way), which Hoeffding (1963) shows is dominated in convex
order by Binomial(F, pi). So for a relative risk r > 1, with
q = pi r / (pi r + 1 - pi), the likelihood ratio
(q / pi)^x ((1 - q) / (1 - pi))^(F - x) has expectation at most 1 under the
null given everything before the cell, and the product over closed cells is a
nonnegative supermartingale. The mixture over `RISKS` (weights
`RISK_WEIGHTS`) is one too, so by Ville's inequality it *ever* reaches 1/alpha
with chance at most alpha, however often it is read and whatever the common
rate does over time. The relative-risk grid is what makes rare failures work:
a tenfold rise from 0.001 is r = 10, a drop of 0.05 from a 0.5 pass rate
r = 1.1; one grid serves every base rate. No p0 is estimated, so a new role
with no history keeps its level.

A cell counts once it is closed: its bucket ended before the report horizon,
`now - max(GRACE_S, every arm's p99 lag from a run's start to its report)`
(`report_horizon`, the lags measured in each arm's window), so a bucket is read
only when the runs that started in it, on the slower arm too, have had time to
report; never half-reported for the arm that runs or reports later. The
yardstick is every arm's own lag, the maximum taken: a slow candidate pushes
the horizon back, never forward. An arm with runs but under
`units.MIN_LAG_REPORTS` lags closes nothing yet; an arm whose runs carry no lag
at all (filed by a release before this one, by their end) is read after
`GRACE_S` as then. The e-value therefore changes only when a bucket closes
(or a late run lands in a closed one).

**The CUSUM** (`cusum`): the same per-cell log ratio at one risk
(`CUSUM_RISK`), summed and floored at zero (Page), alarming at h. Each
possible start of the sum is a test martingale, so over `horizon` cells the
chance of any false alarm is at most horizon * e^-h (`cusum_h`): the detector
of a change late in a long stage, judged against current over the same cells.

Pure: counts in, numbers out.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.stats.units import lag_quantile


def _seconds(variable: str, default: int) -> int:
    """A bucket setting from the environment, else `default`; refused unless a whole >= 1.

    Every router of a deployment must use the same values (ingest files runs by them and
    the gate view reads them back): set them, if at all, with no rollout live.
    """
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{variable} must be a whole number of seconds >= 1, got {raw!r}")
    return int(raw)


#: Seconds per time bucket: runs are compared only with runs of the same bucket
#: (ROLEGATE_BUCKET_SECONDS; smaller buckets decide sooner at low traffic).
BUCKET_S = _seconds("ROLEGATE_BUCKET_SECONDS", 30)
#: Seconds after its end before a bucket counts (late traces still land in it)
#: (ROLEGATE_BUCKET_GRACE_SECONDS).
GRACE_S = _seconds("ROLEGATE_BUCKET_GRACE_SECONDS", 30)
#: Relative risks (candidate's rate over current's) the mixture is over, and their weights.
RISKS: tuple[float, ...] = (1.2, 1.5, 2.1, 3.2, 5.0, 7.5, 11.0, 17.0, 26.0)
RISK_WEIGHTS: tuple[float, ...] = tuple(1.0 / len(RISKS) for _ in RISKS)
#: The relative risk the CUSUM is tuned to.
CUSUM_RISK = 2.0
ZERO: tuple[float, ...] = tuple(0.0 for _ in RISKS)


@dataclass(frozen=True)
class Cell:
    """One (time bucket, stratum): each arm's runs and how many had the event."""

    candidate_n: int
    candidate_events: int
    current_n: int
    current_events: int
    bucket: int = 0
    stratum: str = ""

    def __post_init__(self) -> None:
        if not (0 <= self.candidate_events <= self.candidate_n
                and 0 <= self.current_events <= self.current_n):
            raise ValueError(f"events must be within 0..n in each arm: {self}")

    @property
    def informative(self) -> bool:
        """True when both arms ran in the cell and at least one run had the event."""
        return (self.candidate_n > 0 and self.current_n > 0
                and self.candidate_events + self.current_events > 0)


#: Most outcomes a cell's exact conditional law is summed over; a larger cell
#: uses the binomial bound instead (valid, slightly conservative).
EXACT_SUPPORT = 4_000


def cell_logs(cell: Cell) -> tuple[float, ...]:
    """ln of the cell's likelihood ratio at each of `RISKS` against no difference."""
    if not cell.informative:
        return ZERO
    return _cell_logs(cell.candidate_n, cell.candidate_events, cell.current_n,
                      cell.current_events)


def cell_log_ratio(cell: Cell, risk: float) -> float:
    """ln of the cell's likelihood ratio at one odds ratio `risk` (any value > 0)."""
    if not cell.informative:
        return 0.0
    return _one(cell.candidate_n, cell.candidate_events, cell.current_n, cell.current_events,
                risk)


@functools.lru_cache(maxsize=200_000)
def _one(cn: int, ce: int, kn: int, ke: int, risk: float) -> float:
    return _exact(cn, ce, kn, ke, (risk,))[0]


@functools.lru_cache(maxsize=200_000)
def _cell_logs(cn: int, ce: int, kn: int, ke: int) -> tuple[float, ...]:
    return _exact(cn, ce, kn, ke, RISKS)


def _exact(cn: int, ce: int, kn: int, ke: int, risks: Sequence[float]) -> tuple[float, ...]:
    """Fisher's noncentral hypergeometric ratio psi^x / E_1[psi^X] for each psi in `risks`.

    X, the candidate's share of the cell's F events given both arms' runs, is
    central hypergeometric under the null; the ratio's expectation there is 1.
    """
    events = ce + ke
    low, high = max(0, events - kn), min(events, cn)
    if high - low > EXACT_SUPPORT:
        return tuple(_binomial(cn, ce, kn, ke, r) for r in risks)
    # ln C(cn, y) + ln C(kn, F - y), up to a constant, over the support.
    logs_h = [-(math.lgamma(y + 1) + math.lgamma(cn - y + 1) + math.lgamma(events - y + 1)
                + math.lgamma(kn - events + y + 1)) for y in range(low, high + 1)]
    top_h = max(logs_h)
    out = []
    for risk in risks:
        tilt = math.log(risk)
        tilted = [h + (low + i) * tilt for i, h in enumerate(logs_h)]
        top = max(tilted)
        log_norm = top + math.log(sum(math.exp(t - top) for t in tilted))
        base = top_h + math.log(sum(math.exp(h - top_h) for h in logs_h))
        out.append(ce * tilt - (log_norm - base))
    return tuple(out)


def _binomial(cn: int, ce: int, kn: int, ke: int, risk: float) -> float:
    """The binomial bound's ratio (Hoeffding: hypergeometric <= binomial in convex order)."""
    pi = cn / (cn + kn)
    q = pi * risk / (pi * risk + 1.0 - pi)
    return ce * math.log(q / pi) + ke * math.log((1.0 - q) / (1.0 - pi))


def _mixture(logs: Sequence[float], weights: Sequence[float]) -> float:
    terms = [math.log(w) + x for w, x in zip(weights, logs)]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


@dataclass(frozen=True)
class Comparison:
    """The summed per-risk log ratios over some cells: what a later stage carries on."""

    logs: tuple[float, ...] = ZERO
    cells: int = 0
    candidate_n: int = 0
    candidate_events: int = 0
    current_n: int = 0
    current_events: int = 0

    @classmethod
    def of(cls, cells: Iterable[Cell]) -> Comparison:
        """Sum the informative cells' log ratios at each of `RISKS`."""
        return cls().fold(cells)

    def fold(self, cells: Iterable[Cell]) -> Comparison:
        """These cells added to the ones summed so far, one by one in order (so folding
        the cells in parts gives the very numbers `of` gives over all of them)."""
        logs = list(self.logs)
        count, cn, ce = self.cells, self.candidate_n, self.candidate_events
        kn, ke = self.current_n, self.current_events
        for cell in cells:
            if cell.candidate_n == 0 or cell.current_n == 0:
                continue
            count += 1
            cn, ce = cn + cell.candidate_n, ce + cell.candidate_events
            kn, ke = kn + cell.current_n, ke + cell.current_events
            if cell.informative:
                for i, value in enumerate(cell_logs(cell)):
                    logs[i] += value
        return Comparison(tuple(logs), count, cn, ce, kn, ke)

    def merge(self, other: Comparison) -> Comparison:
        """Both sets of cells (disjoint: earlier stages and this one)."""
        return Comparison(tuple(a + b for a, b in zip(self.logs, other.logs)),
                          self.cells + other.cells, self.candidate_n + other.candidate_n,
                          self.candidate_events + other.candidate_events,
                          self.current_n + other.current_n,
                          self.current_events + other.current_events)

    def log_e(self) -> float:
        """ln of the mixture e-value over `RISKS`."""
        return _mixture(self.logs, RISK_WEIGHTS)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (and read back by `from_dict`): what the rollout section carries."""
        return {"log_e": round(self.log_e(), 4), "logs": [round(x, 6) for x in self.logs],
                "cells": self.cells,
                "candidate": {"n": self.candidate_n, "events": self.candidate_events},
                "current": {"n": self.current_n, "events": self.current_events}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Comparison:
        """Read `as_dict` back; an empty or foreign one is no evidence."""
        if not isinstance(data, Mapping):
            return cls()
        logs = data.get("logs")
        if not isinstance(logs, list) or len(logs) != len(RISKS):
            return cls()
        cand, cur = data.get("candidate") or {}, data.get("current") or {}
        return cls(tuple(float(x) for x in logs), int(data.get("cells", 0)),
                   int(cand.get("n", 0)), int(cand.get("events", 0)),
                   int(cur.get("n", 0)), int(cur.get("events", 0)))


@dataclass(frozen=True)
class ConcurrentTest:
    """The comparison's verdict at level alpha."""

    comparison: Comparison
    threshold: float
    alpha: float

    @property
    def log_e(self) -> float:
        """ln of the e-value."""
        return self.comparison.log_e()

    @property
    def reject(self) -> bool:
        """True when the e-value reached 1/alpha: the candidate's rate is higher, at level alpha."""
        return self.log_e >= self.threshold

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the view and the decision's details."""
        return {**self.comparison.as_dict(), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "reject": self.reject}


def concurrent_test(cells: Iterable[Cell], alpha: float,
                    carried: Comparison | None = None) -> ConcurrentTest:
    """Test "the candidate's event rate is no higher than current's" at level alpha.

    `cells` are closed (time bucket, stratum) cells; `carried` the comparison
    of earlier cells (earlier stages of the rollout). Valid at every look.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    found = Comparison.of(cells)
    if carried is not None:
        found = carried.merge(found)
    return ConcurrentTest(found, math.log(1.0 / alpha), alpha)


# -- cells from counts ---------------------------------------------------------------

#: Per arm: (bucket, stratum) -> (runs, events).
Counts = Mapping[tuple[int, str], tuple[int, int]]


def bucket_of(time: float) -> int:
    """The time bucket of a run that started at `time` (epoch seconds)."""
    return int(time // BUCKET_S)


def closed_before(now: float) -> int:
    """The first bucket not closed at `now` by the grace alone (the horizon's latest)."""
    return int((now - GRACE_S) // BUCKET_S)


def report_horizon(now: float, arms: Iterable[tuple[int, Mapping[int, int]]]) -> float | None:
    """Runs that started before this time have reported on every arm (their p99 has).

    `arms`: per arm, (its runs, its histogram of start-to-report lags in
    `units.lag_bucket`s). An arm with runs and no lag (a release before this one filed
    them, by their end) waits the grace as then; None while an arm has fewer lags than
    `units.MIN_LAG_REPORTS` (its runs' length and report lag are not known yet).
    """
    waits = [float(GRACE_S)]
    for runs, lags in arms:
        if runs <= 0 or not lags:
            continue
        found = lag_quantile(lags)
        if found is None:
            return None
        waits.append(found)
    return now - max(waits)


def horizon_before(horizon: float | None, first: int) -> int:
    """The first bucket not closed at `horizon`: `first` (the stage's first bucket with
    cells; nothing closed) while the horizon is not known."""
    return first if horizon is None else int(horizon // BUCKET_S)



def cells_of(candidate: Counts, current: Counts, *, before: int | None = None) -> list[Cell]:
    """The cells both arms' counts make, oldest bucket first; only buckets < `before`."""
    out = []
    for key in sorted(candidate.keys() | current.keys()):
        if before is not None and key[0] >= before:
            continue
        cn, ce = candidate.get(key, (0, 0))
        kn, ke = current.get(key, (0, 0))
        out.append(Cell(cn, ce, kn, ke, key[0], key[1]))
    return out


# -- the CUSUM -----------------------------------------------------------------------

def cusum_h(alpha: float, horizon: int) -> float:
    """The h keeping any false alarm over `horizon` cells within `alpha` (horizon e^-h)."""
    if not 0.0 < alpha < 1.0 or horizon < 1:
        raise ValueError(f"alpha within (0, 1) and horizon >= 1, got {alpha}, {horizon}")
    return math.log(horizon / alpha)


@dataclass(frozen=True)
class CusumState:
    """Page's CUSUM of the per-cell log ratio at `CUSUM_RISK`, and its alarm."""

    s: float
    h: float
    cells: int
    alarm_bucket: int | None

    @property
    def alarm(self) -> bool:
        """True once the sum reached h (kept: an alarm is not taken back)."""
        return self.alarm_bucket is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"s": round(self.s, 4), "h": round(self.h, 4), "risk": CUSUM_RISK,
                "cells": self.cells, "alarm": self.alarm, "alarm_bucket": self.alarm_bucket}


    def fold(self, cells: Iterable[Cell]) -> CusumState:
        """Advance over `cells`: whole buckets, each later than every bucket folded so far
        (a bucket's strata are summed before the step, so a bucket is never split)."""
        by_bucket: dict[int, float] = {}
        for cell in cells:
            if cell.informative:
                by_bucket[cell.bucket] = by_bucket.get(cell.bucket, 0.0) + cell_log_ratio(
                    cell, CUSUM_RISK)
        s, alarm = self.s, self.alarm_bucket
        for bucket in sorted(by_bucket):
            s = max(0.0, s + by_bucket[bucket])
            if alarm is None and s >= self.h:
                alarm = bucket
        return CusumState(s, self.h, self.cells + len(by_bucket), alarm)


def cusum(cells: Iterable[Cell], h: float) -> CusumState:
    """Run the CUSUM over `cells` in bucket order (strata of one bucket summed)."""
    return CusumState(0.0, h, 0, None).fold(cells)
