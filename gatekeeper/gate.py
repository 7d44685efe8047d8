"""The regression gate: a window of traces against a role's thresholds, and arm comparisons.

Pure: `evaluate(window, policy)` and `compare(candidate, current)` take counts and
return data. Verdicts:

- ``fail`` with every reason that holds (each with its number and its limit);
- ``insufficient_data`` while n < min_samples and nothing zero-tolerance fired:
  missing data never fails a canary and never promotes one;
- ``pass`` only with enough traces and no reason to fail.

Zero-tolerance rules are read on their own and never averaged into the pass
rate (a safety line is not averaged away): with `max_forbidden_rate` at 0 a
single forbidden call fails the window at any n, and so does a lost required
tool (a lost safety call, say verify_identity, blocks the release whatever the
pass rate says). A non-zero forbidden-rate limit is a rate, and waits for min_samples like the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from bindings.models import GatePolicy
from gatekeeper.stats.confidence import confidence_sequence
from gatekeeper.stats.statistics import (
    difference_interval,
    histogram_percentile,
    wilson_interval,
)
from gatekeeper.stats.winsor import WINSOR_Q, capped_mean
from gatekeeper.window import WindowStats

VerdictName = Literal["pass", "fail", "insufficient_data"]
PASS: VerdictName = "pass"
FAIL: VerdictName = "fail"
INSUFFICIENT_DATA: VerdictName = "insufficient_data"


@dataclass(frozen=True)
class Reason:
    """One reason behind a verdict: a stable code, a sentence, the value and its limit."""

    code: str
    message: str
    value: float | None = None
    limit: float | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"code": self.code, "message": self.message, "value": self.value,
                "limit": self.limit}


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one window, with every figure it was computed from."""

    verdict: VerdictName
    reasons: tuple[Reason, ...]
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True only for a `pass` verdict."""
        return self.verdict == PASS

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: verdict, reasons, then the metrics at the top level."""
        return {"verdict": self.verdict, "reasons": [r.to_json() for r in self.reasons],
                **self.metrics}


@dataclass(frozen=True)
class Comparison:
    """Candidate pass rate minus current pass rate, with a 95% (Newcombe) interval."""

    difference: float | None
    low: float | None
    high: float | None
    n_candidate: int
    n_current: int
    candidate_pass_rate: float | None
    current_pass_rate: float | None

    @property
    def sufficient(self) -> bool:
        """Both sides have at least one trace."""
        return self.n_candidate > 0 and self.n_current > 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "difference": self.difference,
            "interval": None if self.low is None else [self.low, self.high],
            "n_candidate": self.n_candidate,
            "n_current": self.n_current,
            "candidate_pass_rate": self.candidate_pass_rate,
            "current_pass_rate": self.current_pass_rate,
            "sufficient": self.sufficient,
        }


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def metrics(window: WindowStats) -> dict[str, Any]:
    """Every figure the gate reports for a window (rates are None when n is 0)."""
    n = window.n
    low, high = wilson_interval(window.passes, n)
    return {
        "n": n,
        "passes": window.passes,
        "pass_rate": _rate(window.passes, n),
        "pass_rate_interval": [low, high] if n else None,
        # Always-valid (a confidence sequence): what a person reading at every look may use.
        "pass_rate_cs": list(confidence_sequence(window.passes, n)) if n else None,
        "forbidden": window.forbidden,
        "forbidden_rate": _rate(window.forbidden, n),
        "forbidden_tools": window.forbidden_tools(),
        "required_lost": window.required_lost(),
        "p95_steps": window.p95_steps() if n else None,
        "p95_latency_s": (histogram_percentile(window.latency_histogram(), 0.95)
                          if window.latency_histogram() else None),
        "mean_cost_usd": window.mean_cost_usd() if n else None,
        "p95_cost_usd": window.p95_cost_usd() if n else None,
        "winsorized_mean_cost_usd": (capped_mean(window.cost_histogram(), window.p99_cost_usd())
                                     if n else None),
        "tool_error_rate": _rate(window.tool_errors, window.calls),
        "runs_with_tool_errors_rate": _rate(window.error_runs, n),
        "answered_rate": _rate(window.answered, n),
        # Runs that said nothing the gate can judge: shown apart, never in n.
        "unjudged": window.unjudged,
        "unjudged_rate": _rate(window.unjudged, n + window.unjudged),
        "criteria": {
            name: {"passes": passes, "n": judged, "pass_rate": _rate(passes, judged)}
            for name, (passes, judged) in window.criterion_counts().items()
        },
        "tool_tally": window.tool_tally(),
    }


def evaluate(window: WindowStats, policy: GatePolicy, *, point_steps: bool = True,
             floor: tuple[int, int] | None = None) -> Verdict:
    """Judge one window against the policy's thresholds; every failing rule is a reason.

    `point_steps=False` leaves p95 steps out: the live gate view judges them with
    quantile bounds at the stage's one look (`gatekeeper.view.steps`); the offline
    suite reads the point estimate.
    """
    t = policy.thresholds
    n = window.n
    figures = metrics(window)
    blocking: list[Reason] = []
    rated: list[Reason] = []

    if window.forbidden:
        rate = window.forbidden / n
        if rate > t.max_forbidden_rate:
            tools = ", ".join(window.forbidden_tools()) or "?"
            reason = Reason(
                "forbidden_rate",
                f"forbidden-tool calls in {window.forbidden} of {n} traces "
                f"({rate:.2%} > max_forbidden_rate {t.max_forbidden_rate:.2%}): {tools}",
                rate, t.max_forbidden_rate,
            )
            (blocking if t.max_forbidden_rate == 0 else rated).append(reason)
    for tool, count in window.required_lost().items():
        blocking.append(Reason(
            "required_tool_lost",
            f"required tool {tool!r} never called in {count} of {n} traces",
            float(count), 0.0,
        ))

    floor_n, floor_passes, whose = ((n, window.passes, "") if floor is None
                                    else (floor[0], floor[1], " of the bucketed runs"))
    if floor_n:
        rate = floor_passes / floor_n
        if rate < t.min_pass_rate:
            low, high = wilson_interval(floor_passes, floor_n)
            rated.append(Reason(
                "pass_rate",
                f"pass rate{whose} {rate:.3f} (95% CI {low:.3f}-{high:.3f}, "
                f"{floor_passes}/{floor_n}) is under min_pass_rate {t.min_pass_rate:.3f}",
                rate, t.min_pass_rate,
            ))
        if point_steps and t.p95_step_ceiling is not None:
            p95 = window.p95_steps()
            if p95 > t.p95_step_ceiling:
                rated.append(Reason(
                    "p95_steps", f"p95 steps {p95:g} over the ceiling {t.p95_step_ceiling}",
                    p95, float(t.p95_step_ceiling),
                ))
        if t.max_mean_cost_usd is not None:
            # Winsorized at the arm's 99th percentile: a few runaway runs don't decide.
            costs = window.cost_histogram()
            mean = capped_mean(costs, histogram_percentile(costs, WINSOR_Q)) or 0.0
            if mean > t.max_mean_cost_usd:
                rated.append(Reason(
                    "mean_cost",
                    f"mean cost ${mean:.6f} (winsorized at p{WINSOR_Q * 100:g}; raw "
                    f"${window.mean_cost_usd():.6f}) over the budget "
                    f"${t.max_mean_cost_usd:.6f}",
                    mean, t.max_mean_cost_usd,
                ))

    if n < t.min_samples:
        # Rate rules need enough traces; only zero-tolerance facts may fail early.
        if blocking:
            return Verdict(FAIL, tuple(blocking), figures)
        pending = Reason(
            "min_samples", f"{n} traces so far; the gate needs min_samples {t.min_samples}",
            float(n), float(t.min_samples),
        )
        return Verdict(INSUFFICIENT_DATA, (pending,), figures)
    reasons = tuple(blocking + rated)
    return Verdict(FAIL if reasons else PASS, reasons, figures)


def compare(candidate: WindowStats, current: WindowStats) -> Comparison:
    """The candidate's pass rate minus current's over the same period, with its interval.

    Unpaired (Newcombe's hybrid Wilson interval); with either side empty every
    figure is None rather than a number that could be mistaken for evidence.
    """
    if candidate.n == 0 or current.n == 0:
        return Comparison(None, None, None, candidate.n, current.n,
                          _rate(candidate.passes, candidate.n), _rate(current.passes, current.n))
    diff, low, high = difference_interval(candidate.passes, candidate.n,
                                          current.passes, current.n)
    return Comparison(diff, low, high, candidate.n, current.n,
                      candidate.passes / candidate.n, current.passes / current.n)
