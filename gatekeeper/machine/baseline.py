"""The current arm's failure rate the candidate's sequential rate test runs against. Pure.

Read out of the gate view's drift section (the candidate's run_failure detector's
p0, the rate current's runs showed and how many runs that was) by
`decide.evidence_from_view`.
"""

from __future__ import annotations

from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.view_model.drift import DetectorView, DriftView


def run_failure(drift: DriftView | None) -> DetectorView | None:
    """The candidate's run_failure detector in the view's drift section, if it has one."""
    return None if drift is None else drift.candidate.get(RUN_FAILURE)


def baseline_failure(drift: DriftView | None) -> float | None:
    """The run_failure p0 the gate view's candidate detector runs with, if it has one."""
    detector = run_failure(drift)
    return None if detector is None else float(detector.p0)


def baseline_runs(drift: DriftView | None) -> int:
    """How many current runs that p0 was measured over (0: a fixed baseline)."""
    detector = run_failure(drift)
    return 0 if detector is None else detector.reference


def baseline_observed(drift: DriftView | None) -> float | None:
    """The failure rate current's runs showed over `baseline_runs` (p0 is its upper bound);
    None for a fixed baseline or a view that does not say."""
    detector = run_failure(drift)
    return None if detector is None or detector.observed is None else float(detector.observed)
