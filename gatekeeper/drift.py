"""Drift alarms: a one-sided Bernoulli CUSUM per (role, config, metric).

p0 comes from the policy's fixed baseline or else from the current arm's own
runs; p1 = p0 + shift is the rate worth detecting; k = (p0 + p1) / 2 (seed 002).
The detector's state is never stored: it is replayed from the ordered trace
stream each time the gate view is built, so every tick continues exactly where
the last one left off, and two gatekeepers always see the same sum.

An alarm on a candidate rolls it back; an alarm on a stable current raises an
alert. `calibrate` replays known-good runs through a detector and counts false
alarms per h, so h is chosen from history, not by intuition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bindings.models import DriftPolicy
from gatekeeper.pairing import Run
from gatekeeper.statistics import Cusum

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
            out[metric] = replay(metric, runs, p0=p0, shift=policy.shift, h=policy.h)
    return out


def drift_view(candidate: Sequence[Run] | None, current: Sequence[Run],
               policy: DriftPolicy) -> dict[str, Any]:
    """The gate view's "drift" section: candidate vs current's rates, current vs its past.

    The candidate is watched against p0 from the current arm. The current is
    watched over its newer half against p0 from its older half (or the fixed
    baseline), which is what "a stable current drifted" means without a release.
    """
    if not policy.enabled:
        return {"enabled": False, "candidate": {}, "current": {}, "alarms": []}
    cand = watch(candidate, current, policy) if candidate is not None else {}
    half = len(current) // 2
    cur = watch(current[half:], current[:half], policy) if half else {}
    alarms = [{"arm": "candidate", "metric": m} for m, r in cand.items() if r.alarm]
    alarms += [{"arm": "current", "metric": m} for m, r in cur.items() if r.alarm]
    return {
        "enabled": True,
        "shift": policy.shift,
        "h": policy.h,
        "candidate": {m: r.as_dict() for m, r in cand.items()},
        "current": {m: r.as_dict() for m, r in cur.items()},
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
