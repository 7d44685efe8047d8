"""Drift alarms: a one-sided Bernoulli CUSUM per (role, config, metric).

p0 comes from the policy's fixed baseline or else from the current arm's own
runs; p1 = p0 + shift is the rate worth detecting; k = (p0 + p1) / 2,
midway between the rate tolerated and the rate worth detecting.
The gate view keeps each detector's state (`Detector`: sum, counts, alarms, the
last stream id it read, the p0 it runs with) and advances it over the new runs
only, so a read costs what arrived since the last one, not the whole stage; the
state lives in Redis (`gatekeeper.store.drift_state`), this module does no I/O.
`replay` runs the same math over a list of runs from scratch: a Detector fed
the same runs with the same p0 stands exactly where `replay` does.

An alarm on a candidate rolls it back; an alarm on a stable current raises an
alert. `calibrate` replays known-good runs through a detector and counts false
alarms per h, so h is chosen from history, not by intuition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bindings.models import DriftPolicy, Thresholds
from gatekeeper.stats.budget import cusum_arl0
from gatekeeper.stats.cusum_arl import h_for_arl
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.statistics import Cusum, wilson_interval
from gatekeeper.window import WindowStats

RUN_FAILURE = "run_failure"
TOOL_ERROR = "tool_error"
FORBIDDEN_CALL = "forbidden_call"

#: Each metric: a 0/1 signal read off one run.
METRICS: dict[str, Callable[[Run], bool]] = {
    RUN_FAILURE: lambda run: not run.passed,
    TOOL_ERROR: lambda run: run.tool_error,
    FORBIDDEN_CALL: lambda run: run.forbidden_call,
}

#: A p0 of exactly 0 would make any single event look infinitely surprising
#: relative to it; floor it so the detector stays a detector of *rates*.
MIN_P0 = 0.001
#: p1 stays under 1 so the CUSUM's run lengths stay finite.
MAX_P1 = 0.999
#: One-sided z of the upper bound a measured p0 is taken at (about 84%): the
#: tests run against a p0 no lower than the current's rate is likely to be, so a
#: small reference cannot make a healthy candidate look worse (Jensen et al. 2006
#: on estimated control limits). `bench/rollout_sim.py` measures the trade.
P0_Z = 1.0
#: Significant digits a measured p0 is rounded up to: a grid lets the derived h
#: be cached (up to ~0.1 s to solve), and rounding up is conservative. Two digits
#: were too coarse: 0.501 became 0.51, and the rate test lost ~40% of its power
#: against a 0.05 drop from a 0.5 base.
P0_DIGITS = 3


def bounded_p0(observed: float, reference: int, z: float = P0_Z) -> float:
    """The upper Wilson bound (at `z`) of a rate observed over `reference` runs, rounded up."""
    failures = min(reference, max(0, round(observed * reference)))
    upper = max(observed, wilson_interval(failures, reference, z)[1]) if reference else observed
    upper = max(MIN_P0, upper)
    scale = 10.0 ** (P0_DIGITS - 1 - math.floor(math.log10(upper)))
    return min(1.0, math.ceil(upper * scale - 1e-9) / scale)


def derived_h(policy: DriftPolicy, p0: float, alpha: float | None = None) -> float:
    """The policy's h, or when it sets none the h whose in-control ARL at p0 is the
    CUSUM's share of the stage alpha (`budget.cusum_arl0`), from `cusum_arl`."""
    if policy.h is not None:
        return policy.h
    stage_alpha = Thresholds().alpha if alpha is None else alpha
    p1 = min(MAX_P1, p0 + policy.shift)
    if p0 >= p1:
        return math.inf
    return h_for_arl(p0, p1, cusum_arl0(stage_alpha))


@dataclass(frozen=True)
class CusumReport:
    """One detector after replaying a stream: its parameters, sum, and alarms."""

    metric: str
    p0: float
    p1: float
    h: float
    n: int
    events: int
    s: float
    alarms: int
    first_alarm_at: int | None

    @property
    def alarm(self) -> bool:
        """True when the detector fired at least once over the stream."""
        return self.alarms > 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, as shown in the gate view."""
        return {"metric": self.metric, "p0": self.p0, "p1": self.p1,
                "k": (self.p0 + self.p1) / 2.0, "h": self.h, "n": self.n,
                "events": self.events, "s": self.s, "alarm": self.alarm,
                "alarms": self.alarms, "first_alarm_at": self.first_alarm_at}


def rate(runs: Sequence[Run], metric: str) -> float | None:
    """The metric's rate over `runs`; None when there are none."""
    if not runs:
        return None
    signal = METRICS[metric]
    return sum(1 for run in runs if signal(run)) / len(runs)


def baseline(metric: str, policy: DriftPolicy, reference: Sequence[Run]) -> float | None:
    """p0 for `metric`: the policy's fixed baseline, else the reference runs' rate."""
    if metric in policy.baseline:
        return max(MIN_P0, policy.baseline[metric])
    observed = rate(reference, metric)
    return None if observed is None else max(MIN_P0, observed)


def replay(metric: str, runs: Iterable[Run], *, p0: float, shift: float,
           h: float) -> CusumReport:
    """Feed `runs` in order through a fresh CUSUM for `metric` and report where it stands."""
    p1 = min(1.0, p0 + shift)
    detector = Cusum(p0=p0, p1=p1, h=h)
    signal = METRICS[metric]
    n = events = 0
    first: int | None = None
    for run in runs:
        n += 1
        event = signal(run)
        events += int(event)
        if detector.update(event) and first is None:
            first = n
    return CusumReport(metric=metric, p0=p0, p1=p1, h=h, n=n, events=events,
                       s=round(detector.s, 6), alarms=detector.alarms, first_alarm_at=first)


def watch(runs: Sequence[Run], reference: Sequence[Run], policy: DriftPolicy,
          metrics: Iterable[str] = tuple(METRICS)) -> dict[str, CusumReport]:
    """One detector per metric over `runs`, p0 from the policy or the `reference` runs.

    A metric with no p0 (no baseline and no reference runs) gets no detector:
    an alarm needs something to have drifted *from*.
    """
    out: dict[str, CusumReport] = {}
    for metric in metrics:
        p0 = baseline(metric, policy, reference)
        if p0 is not None:
            out[metric] = replay(metric, runs, p0=p0, shift=policy.shift,
                                 h=derived_h(policy, p0))
    return out


def drift_view(candidate: Sequence[Run] | None, current: Sequence[Run],
               policy: DriftPolicy) -> dict[str, Any]:
    """The "drift" section replayed from runs: candidate vs current's rates, current vs its past.

    The candidate is watched against p0 from the current arm. The current is
    watched over its newer half against p0 from its older half (or the fixed
    baseline), which is what "a stable current drifted" means without a release.
    The gate view advances stored `Detector`s instead (`gatekeeper.store.drift_state`);
    this replaying form serves tests and offline comparisons.
    """
    if not policy.enabled:
        return disabled_view()
    cand = watch(candidate, current, policy) if candidate is not None else {}
    half = len(current) // 2
    cur = watch(current[half:], current[:half], policy) if half else {}
    return section({m: r.as_dict() for m, r in cand.items()},
                   {m: r.as_dict() for m, r in cur.items()}, policy)


def disabled_view() -> dict[str, Any]:
    """The "drift" section when the policy turns drift off."""
    return {"enabled": False, "candidate": {}, "current": {}, "alarms": []}


def section(cand: Mapping[str, dict[str, Any]], cur: Mapping[str, dict[str, Any]],
            policy: DriftPolicy) -> dict[str, Any]:
    """The "drift" section's JSON from the candidate's and the current's detector dicts."""
    alarms = [{"arm": "candidate", "metric": m} for m, r in cand.items() if r["alarm"]]
    alarms += [{"arm": "current", "metric": m} for m, r in cur.items() if r["alarm"]]
    return {
        "enabled": True,
        "shift": policy.shift,
        "h": policy.h,
        "candidate": dict(cand),
        "current": dict(cur),
        "alarms": alarms,
    }


def calibrate(runs: Sequence[Run], *, metric: str, hs: Iterable[float], shift: float,
              p0: float | None = None) -> list[dict[str, Any]]:
    """Replay known-good `runs` through a detector per h; report the false alarms of each.

    Every alarm on known-good history is a false alarm by definition; `runs_per_alarm`
    is the observed average run length between them (None when none fired).
    """
    base = p0 if p0 is not None else rate(runs, metric)
    if base is None:
        return []
    base = max(MIN_P0, base)
    rows = []
    for h in sorted(set(hs)):
        report = replay(metric, runs, p0=base, shift=shift, h=h)
        rows.append({"h": h, "metric": metric, "p0": base, "p1": report.p1, "n": report.n,
                     "false_alarms": report.alarms,
                     "runs_per_alarm": report.n / report.alarms if report.alarms else None,
                     "first_alarm_at": report.first_alarm_at})
    return rows


def alarms_of(view: Mapping[str, Any], arm: str) -> list[str]:
    """The metrics alarming on `arm` ("candidate" or "current") in a drift view."""
    return [a["metric"] for a in view.get("alarms", []) if a.get("arm") == arm]


# -- incremental detectors -------------------------------------------------------
# The gate view keeps one `Detector` per (role, config, arm, stage epoch, metric)
# in Redis and advances it over the stream entries that arrived since its last
# read; this part is the pure math of that, the storage is `gatekeeper.store.drift_state`.

#: Once p0 rests on this many current runs it is kept for the rest of the stage;
#: below that, a detector restarts whenever its reference has doubled.
SETTLED_REFERENCE = 2_000


@dataclass(frozen=True)
class Params:
    """What one detector runs with: p0, the shift to p1, h, and the runs p0 came from.

    `reference` is how many current runs p0 was measured over; 0 for a fixed
    `drift.baseline`. `observed` is the rate measured over them, p0 its upper
    bound (`bounded_p0`); None for a fixed baseline.
    """

    p0: float
    shift: float
    h: float
    reference: int
    observed: float | None = None
    #: True when h was derived for p0 (the policy sets none): h then follows p0.
    derived: bool = False

    @property
    def p1(self) -> float:
        """The rate worth detecting."""
        return min(1.0, self.p0 + self.shift)


def window_rate(metric: str, window: WindowStats) -> float | None:
    """The metric's rate over a running aggregate; None when it holds no runs."""
    if window.n <= 0:
        return None
    hits = {RUN_FAILURE: window.n - window.passes, TOOL_ERROR: window.error_runs,
            FORBIDDEN_CALL: window.forbidden}[metric]
    return hits / window.n


def params_for(metric: str, policy: DriftPolicy, reference: WindowStats,
               min_reference: int, alpha: float | None = None) -> Params | None:
    """The detector parameters for `metric`: p0 from the fixed baseline or `reference`.

    A measured p0 is its upper bound over the reference (`bounded_p0`), and h is
    derived for it from the stage alpha when the policy sets none (`derived_h`).
    None while the reference aggregate holds fewer than `min_reference` runs: p0
    is frozen when a detector starts, so it must not rest on a handful of runs.
    """
    if metric in policy.baseline:
        p0 = max(MIN_P0, policy.baseline[metric])
        return Params(p0, policy.shift, derived_h(policy, p0, alpha), 0,
                      derived=policy.h is None)
    observed = window_rate(metric, reference)
    if observed is None or reference.n < max(1, min_reference):
        return None
    p0 = bounded_p0(observed, reference.n)
    return Params(p0, policy.shift, derived_h(policy, p0, alpha), reference.n, observed,
                  derived=policy.h is None)


def stream_order(stream_id: str) -> tuple[int, int]:
    """A stream id ("ms-seq") as a sortable pair; "" (nothing read yet) sorts first."""
    if not stream_id:
        return (-1, -1)
    ms, _, seq = stream_id.partition("-")
    return (int(ms), int(seq or 0))


@dataclass(frozen=True)
class Detector:
    """One CUSUM's state after the stream entries up to `last_id` (none read: "")."""

    metric: str
    params: Params
    n: int = 0
    events: int = 0
    s: float = 0.0
    alarms: int = 0
    first_alarm_at: int | None = None
    first_alarm_id: str | None = None
    last_id: str = ""

    def outdated(self, wanted: Params) -> bool:
        """True when the detector must restart to run with `wanted` instead.

        A changed h, shift or fixed baseline restarts it; so does a p0 measured
        over a reference that has since doubled, until the reference is settled.
        An h derived for p0 (the policy sets none) that differs only because p0
        moved is no change of policy: the detector keeps its frozen p0 and the h
        derived for it (else a p0 whose third digit flips as runs arrive restarted
        the detector, and replayed the stage's runs, at every read).
        """
        mine = self.params
        followed = mine.derived and wanted.derived and mine.p0 != wanted.p0
        if mine.shift != wanted.shift or (mine.h != wanted.h and not followed):
            return True
        if (mine.reference == 0) != (wanted.reference == 0):
            return True
        if wanted.reference == 0:
            return mine.p0 != wanted.p0
        return mine.reference < SETTLED_REFERENCE and wanted.reference >= 2 * mine.reference

    def advance(self, entries: Sequence[tuple[str, Run]]) -> Detector:
        """The detector after the `entries` (stream id, run; oldest first) newer than `last_id`."""
        after = stream_order(self.last_id)
        # Entries come oldest first; those up to last_id were counted already (another
        # detector of the arm was behind, so the read started earlier).
        fresh = entries
        skip = 0
        while skip < len(fresh) and stream_order(fresh[skip][0]) <= after:
            skip += 1
        params = self.params
        cusum = Cusum(p0=params.p0, p1=params.p1, h=params.h, s=self.s, alarms=self.alarms)
        signal = METRICS[self.metric]
        n, events, last = self.n, self.events, self.last_id
        first_at, first_id = self.first_alarm_at, self.first_alarm_id
        for entry_id, run in fresh[skip:]:
            n += 1
            event = signal(run)
            events += int(event)
            if cusum.update(event) and first_at is None:
                first_at, first_id = n, entry_id
            last = entry_id
        if last == self.last_id:
            return self
        return Detector(self.metric, params, n=n, events=events, s=cusum.s, alarms=cusum.alarms,
                        first_alarm_at=first_at, first_alarm_id=first_id, last_id=last)

    def report(self) -> CusumReport:
        """Where the detector stands, as `replay` reports it."""
        p = self.params
        return CusumReport(metric=self.metric, p0=p.p0, p1=p.p1, h=p.h, n=self.n,
                           events=self.events, s=round(self.s, 6), alarms=self.alarms,
                           first_alarm_at=self.first_alarm_at)

    def as_dict(self, caught_up: bool) -> dict[str, Any]:
        """JSON-ready for the gate view: the replay's keys plus where it has read to."""
        return {**self.report().as_dict(), "first_alarm_id": self.first_alarm_id,
                "last_id": self.last_id or None, "reference": self.params.reference,
                "observed": self.params.observed, "caught_up": caught_up}
