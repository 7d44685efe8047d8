"""The current arm's failure rate the candidate's sequential rate test runs against. Pure.

Read out of the gate view's drift section (the candidate's run_failure detector's
p0, the rate current's runs showed and how many runs that was) by
`decide.evidence_from_view`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def baseline_failure(drift: Mapping[str, Any]) -> float | None:
    """The run_failure p0 the gate view's candidate detector runs with, if it has one."""
    detector = (drift.get("candidate") or {}).get("run_failure") or {}
    p0 = detector.get("p0")
    # Without the reference count the p0 can't be bounded: no rate test then.
    if not isinstance(p0, (int, float)) or not isinstance(detector.get("reference"), int):
        return None
    return float(p0)


def baseline_runs(drift: Mapping[str, Any]) -> int:
    """How many current runs that p0 was measured over (0: a fixed baseline)."""
    detector = (drift.get("candidate") or {}).get("run_failure") or {}
    reference = detector.get("reference")
    return int(reference) if isinstance(reference, int) else 0


def baseline_observed(drift: Mapping[str, Any]) -> float | None:
    """The failure rate current's runs showed over `baseline_runs` (p0 is its upper bound);
    None for a fixed baseline or a view that does not say."""
    detector = (drift.get("candidate") or {}).get("run_failure") or {}
    observed = detector.get("observed")
    if not isinstance(observed, (int, float)) or isinstance(observed, bool):
        return None
    return float(observed)
