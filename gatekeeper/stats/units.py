"""The unit test: which arm do the units that just went wrong belong to? Pure.

rolegate randomises by unit (the job key, or the binding's `bucket_by`
attribute): each unit lands on the candidate with chance `share`, by a hash
that knows nothing of the unit's difficulty, its volume or the world's
weather. So if the candidate is no worse than current for any unit (the sharp
null), whether a unit's *first* bad event of the rollout falls on the
candidate's side is a coin with chance `share` at the moment the run started,
whatever else is going on: an outage that fails every run started in a
minute fails both arms' units alike, a customer with a thousand runs counts
once, a run retried under its key cannot add a second event, and a slow arm's
run is filed by when it started, not when it ended. That coin is the whole
test: a candidate that fails `r` times as often as current makes a bad unit
the candidate's with chance q = share r / (share r + 1 - share), and the
likelihood ratio of the observed arms, mixed over a grid of `r` (RISKS), is an
e-process under the null: valid at every look, so the gatekeeper reads it at
every tick from the first run, and a candidate failing most of its runs is
rolled back after a handful.

Events are the first of each metric per unit: `run_failure` (the run failed
the invariants), `tool_error`, `slow` and `costly` (over limits fixed once per
rollout from current's runs, so the yardstick never moves with what it
measures) and `crit:<key>` per gated criterion key. The metrics' e-values are
averaged with fixed weights (an average of e-values is one).

Only events of runs that started before the report horizon count: the
seconds for which both arms' reports have had time to arrive (their p99
report lag, from a histogram of it). A candidate whose reports come later
than current's is then waited for, never looked at half-reported.

When units carry several runs each (customers, conversations, retries), the
run-level tests of `gatekeeper.stats.concurrent` and `sequential` treat
correlated runs as independent; `repeats` says so, and the stage machine lets
those tests hold promotion only (`gatekeeper.machine.by_unit`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The relative risks the alternative is mixed over, with equal weight.
RISKS = (1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 40.0)
#: Each metric's share of the combined e-value; criteria share CRITERIA_WEIGHT
#: (or give it to run_failure when the config has no gated criterion).
WEIGHTS = {"run_failure": 0.5, "tool_error": 0.1, "slow": 0.1, "costly": 0.1}
CRITERIA_WEIGHT = 0.2
CRITERION = "crit:"
#: Reports never come back faster than this for the horizon's sake (seconds):
#: a run started a moment ago may still be reporting on either arm.
LAG_FLOOR_S = 2.0
#: An arm's report lag is read once it has this many reports.
MIN_LAG_REPORTS = 5
#: The lag quantile the horizon waits for.
LAG_QUANTILE = 0.99
#: Keys carry several runs each when distinct units < this fraction of runs.
DISTINCT_FRACTION = 0.97
MIN_RUNS_FOR_REPEATS = 20


def lag_bucket(lag_s: float) -> int:
    """The histogram bucket of a report lag: bucket b holds lags up to 2^(b/4) - 1 seconds."""
    if not lag_s > 0.0:  # none, negative (clocks apart) or NaN: bucket 0
        return 0
    return math.ceil(4 * math.log2(1.0 + lag_s))


def bucket_upper(bucket: int) -> float:
    """The largest lag (seconds) bucket `bucket` holds."""
    return float(2.0 ** (bucket / 4) - 1.0)


def lag_quantile(histogram: Mapping[int, int], quantile: float = LAG_QUANTILE) -> float | None:
    """The `quantile` of the lags in `histogram` (an upper bound), None with too few reports."""
    total = sum(histogram.values())
    if total < MIN_LAG_REPORTS:
        return None
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= quantile * total:
            return bucket_upper(bucket)
    return bucket_upper(max(histogram))


def report_horizon(lags: Mapping[str, Mapping[int, int]], now: float) -> float | None:
    """Runs that started before this time have had their reports counted on every arm.

    None until every arm has reported enough runs to know its lag.
    """
    known = [lag_quantile(h) for h in lags.values()]
    if not known or any(q is None for q in known):
        # Every arm's lag must be known: an arm whose reports have not come yet (current's
        # 150 s late) would otherwise leave the other's events read against none of its own.
        return None
    return now - max(LAG_FLOOR_S, *(q for q in known if q is not None))


@dataclass(frozen=True)
class ArmUnits:
    """One arm's unit facts over the rollout: first events, runs, lags, distinct units."""

    #: metric -> start second -> units whose first event of the metric started then.
    events: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    #: metric -> every run with the event (repeats included).
    event_runs: Mapping[str, int] = field(default_factory=dict)
    runs: int = 0
    units: int = 0
    #: report lag bucket -> runs.
    lags: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Stretch:
    """A span of time the rollout sent units to the candidate at one share."""

    since: float
    share: float


def share_at(stretches: Sequence[Stretch], second: float) -> float | None:
    """The share in effect at `second` (None: before the rollout's first live stretch)."""
    current = None
    for stretch in stretches:
        if stretch.since <= second:
            current = stretch.share
    return current


@dataclass(frozen=True)
class MetricEvidence:
    """One metric's mixture e-value and the events behind it."""

    metric: str
    weight: float
    log_e: float
    candidate: int
    current: int

    def as_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "weight": round(self.weight, 4),
                "log_e": round(self.log_e, 4), "candidate_units": self.candidate,
                "current_units": self.current}


@dataclass(frozen=True)
class UnitVerdict:
    """The unit test's reading: the combined e-value, its threshold, and whether keys repeat."""

    log_e: float
    threshold: float
    alpha: float
    horizon: float | None
    metrics: tuple[MetricEvidence, ...] = ()
    #: Units carry several runs each: the run-level tests must not roll back.
    repeats: bool = False
    repeats_why: str = ""

    @property
    def reject(self) -> bool:
        """The candidate is worse than current at the rollout's alpha."""
        return self.log_e >= self.threshold

    def leading(self) -> MetricEvidence | None:
        """The metric that contributes most to the combined e-value."""
        if not self.metrics:
            return None
        return max(self.metrics, key=lambda m: math.log(m.weight) + m.log_e)

    def reason(self) -> str:
        """Why the test rejected, naming the metric that weighed most."""
        lead = self.leading()
        what = "" if lead is None else (
            f", mostly {lead.metric}: {lead.candidate} candidate units vs {lead.current} "
            f"current units had their first {lead.metric.replace('_', ' ')} in the same seconds")
        return (f"unit test e^{self.log_e:.2f} >= e^{self.threshold:.2f} "
                f"(alpha {self.alpha:g}){what}")

    def as_dict(self) -> dict[str, object]:
        lead = self.leading()
        return {"log_e": round(self.log_e, 4), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "reject": self.reject, "horizon": self.horizon,
                "leading": None if lead is None else lead.metric,
                "metrics": [m.as_dict() for m in self.metrics],
                "repeats": self.repeats, "repeats_why": self.repeats_why}


def weights_for(criteria: Sequence[str]) -> dict[str, float]:
    """Each metric's weight: WEIGHTS, the gated `criteria` keys splitting CRITERIA_WEIGHT
    (to run_failure if none). Fixed by the config's spec before any event is seen: a
    weight that followed the events would no longer make an e-value."""
    criteria = sorted({CRITERION + key for key in criteria})
    out = dict(WEIGHTS)
    if criteria:
        for name in criteria:
            out[name] = CRITERIA_WEIGHT / len(criteria)
    else:
        out["run_failure"] += CRITERIA_WEIGHT
    return out


#: The plug-in bettor's memory: the relative risk it bets on is estimated from the
#: metric's last WINDOW events, so a stretch of fair coins (a shared outage) fades
#: and the bet follows a candidate that turns worse after it.
WINDOW = 40
#: The plug-in bettor's share of the metric's e-value (the rest: the fixed mixture).
PLUG_IN_WEIGHT = 0.5


def _events_in_order(candidate: Mapping[int, int], current: Mapping[int, int],
                     stretches: Sequence[Stretch], horizon: float,
                     ) -> list[tuple[float, int, int]]:
    """(share, candidate events, current events) per second before `horizon`, oldest first.

    Seconds when every unit went to one arm (or before the rollout) are left out:
    the arm says nothing there.
    """
    out = []
    for second in sorted(set(candidate) | set(current)):
        if second + 1 > horizon:  # the second must be wholly before it
            continue
        share = share_at(stretches, second)
        if share is None or not 0.0 < share < 1.0:
            continue
        cand, cur = max(0, candidate.get(second, 0)), max(0, current.get(second, 0))
        if cand or cur:
            out.append((share, cand, cur))
    return out


def _log_lr(share: float, risk: float, cand: int, cur: int) -> float:
    """Log likelihood ratio of `cand` candidate and `cur` current events at relative `risk`."""
    q = share * risk / (share * risk + 1.0 - share)
    return cand * math.log(q / share) + cur * math.log((1.0 - q) / (1.0 - share))


def _plug_in_risk(cand: float, cur: float, expected_cand: float, expected_cur: float) -> float:
    """The relative risk recent events show (smoothed toward 1, at most the grid's top):
    candidate events over those expected at the shares, against current's."""
    risk = ((cand + 1.0) / (expected_cand + 1.0)) / ((cur + 1.0) / (expected_cur + 1.0))
    return min(RISKS[-1], max(1.0, risk))


def _add(sums: list[float], share: float, cand: int, cur: int, sign: int) -> None:
    """Add (sign 1) or take away (-1) one second's events from the plug-in's running sums."""
    sums[0] += sign * cand
    sums[1] += sign * cur
    sums[2] += sign * share * (cand + cur)
    sums[3] += sign * (1.0 - share) * (cand + cur)


def metric_log_e(candidate: Mapping[int, int], current: Mapping[int, int],
                 stretches: Sequence[Stretch], horizon: float) -> tuple[float, int, int]:
    """(log e-value, candidate events, current events) of one metric before `horizon`.

    The e-value averages two test martingales over the events in start order: a
    fixed mixture over RISKS (fast when the candidate is worse from its first run)
    and a plug-in bettor whose risk is estimated from the previous WINDOW events
    only (predictable, so still a test martingale), which loses little over a
    stretch of fair coins and recovers after it.
    """
    seconds = _events_in_order(candidate, current, stretches, horizon)
    mixture = [0.0] * len(RISKS)
    plug_in = 0.0
    recent: deque[tuple[float, int, int]] = deque()
    # Running sums over `recent` (events on each arm, and those expected at the shares):
    # a read costs one pass over the seconds, not one over the window per second.
    sums = [0.0, 0.0, 0.0, 0.0]
    held = 0
    for share, cand, cur in seconds:
        risk = _plug_in_risk(*sums)
        if risk > 1.0:
            plug_in += _log_lr(share, risk, cand, cur)
        for index, r in enumerate(RISKS):
            mixture[index] += _log_lr(share, r, cand, cur)
        recent.append((share, cand, cur))
        _add(sums, share, cand, cur, 1)
        held += cand + cur
        while len(recent) > 1 and held - (recent[0][1] + recent[0][2]) >= WINDOW:
            old_share, old_cand, old_cur = recent.popleft()
            _add(sums, old_share, old_cand, old_cur, -1)
            held -= old_cand + old_cur
    top = max(mixture)
    mixed = top + math.log(sum(math.exp(v - top) for v in mixture) / len(mixture))
    high = max(mixed, plug_in)
    combined = high + math.log((1.0 - PLUG_IN_WEIGHT) * math.exp(mixed - high)
                               + PLUG_IN_WEIGHT * math.exp(plug_in - high))
    counted = sum(c for _, c, _ in seconds), sum(k for _, _, k in seconds)
    return combined, counted[0], counted[1]


def repeats_of(arms: Mapping[str, ArmUnits]) -> tuple[bool, str]:
    """Whether units carry several runs each (then run-level tests may only hold)."""
    runs = sum(a.runs for a in arms.values())
    units = sum(a.units for a in arms.values())
    if runs >= MIN_RUNS_FOR_REPEATS and units < DISTINCT_FRACTION * runs:
        return True, f"{units} distinct keys carry {runs} runs"
    failing_units = sum(sum(a.events.get("run_failure", {}).values()) for a in arms.values())
    failing_runs = sum(a.event_runs.get("run_failure", 0) for a in arms.values())
    repeated = failing_runs - failing_units
    if repeated > max(2, 0.03 * failing_units):
        return True, f"{failing_runs} failed runs came from {failing_units} keys (retries)"
    return False, ""


def unit_test(candidate: ArmUnits, current: ArmUnits, stretches: Sequence[Stretch],
              now: float, alpha: float, criteria: Sequence[str] = ()) -> UnitVerdict:
    """Read the unit test over the rollout's units at `now`, at level `alpha`.

    `criteria` are the gated criterion keys of the candidate's spec (events of
    other keys are left out).
    """
    threshold = math.log(1.0 / alpha)
    repeats, why = repeats_of({"candidate": candidate, "current": current})
    horizon = report_horizon({"candidate": candidate.lags, "current": current.lags}, now)
    if horizon is None:
        return UnitVerdict(0.0, threshold, alpha, None, (), repeats, why)
    weights = weights_for(criteria)
    metrics = []
    for name in sorted(weights):
        log_e, cand, cur = metric_log_e(candidate.events.get(name, {}),
                                        current.events.get(name, {}), stretches, horizon)
        metrics.append(MetricEvidence(name, weights[name], log_e, cand, cur))
    top = max(math.log(m.weight) + m.log_e for m in metrics)
    combined = top + math.log(sum(math.exp(math.log(m.weight) + m.log_e - top)
                                  for m in metrics))
    return UnitVerdict(combined, threshold, alpha, horizon, tuple(metrics), repeats, why)
