"""What decide() reads of the gate view's `concurrent` section (`gatekeeper.view.concurrent`).

The stage's run-failure comparison with concurrent current, and the stage-end
look's counts taken over the cells both arms ran in (same minutes, same
stratum) instead of each arm's whole window; under `gate.reports.missing_runs:
"fail"` those counts include the runs that never reported, as failed runs, and
a rollback's reason says how many. Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, TypeVar

from gatekeeper.stats.concurrent import Comparison
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.stats.rollout import Carried
from gatekeeper.view_model.concurrent import ConcurrentView


class Evidence(Protocol):
    """The fields of `decide.Evidence` read here (a protocol: decide imports this module)."""

    @property
    def concurrent(self) -> ConcurrentView | None: ...

    @property
    def candidate_alarms(self) -> tuple[str, ...]: ...


E = TypeVar("E", bound=Evidence)


def concurrent_of(evidence: Evidence) -> Comparison | None:
    """The stage's run-failure comparison with concurrent current; None without the section."""
    if evidence.concurrent is None:
        return None
    return evidence.concurrent.comparison(RUN_FAILURE)


def matched(evidence: E) -> E:
    """For the stage-end look: with the concurrent section, both arms' runs of the cells
    both ran in, not each arm's whole window."""
    found = concurrent_of(evidence)
    if found is None:
        return evidence
    return replace(evidence, n=found.candidate_n,  # type: ignore[type-var]
                   passes=found.candidate_n - found.candidate_events,
                   current_n=found.current_n,
                   current_passes=found.current_n - found.current_events)


def candidate_alarms(evidence: Evidence) -> tuple[list[str], str]:
    """(metrics, what alarmed): the CUSUMs against concurrent current; from a view without
    the section, the drift detectors against current's p0."""
    if evidence.concurrent is None:
        return list(evidence.candidate_alarms), "drift alarm"
    alarms = list(evidence.concurrent.alarms)
    counted = missing_words(evidence) if RUN_FAILURE in alarms else ""
    return alarms, "CUSUM against concurrent current" + (f", {counted}," if counted else "") \
        + " alarms"


def missing_words(evidence: Evidence) -> str:
    """"counting N candidate and M current runs that never reported as failed" when the
    run-failure comparison counted any (`gate.reports.missing_runs`), else ""."""
    missing = None if evidence.concurrent is None else evidence.concurrent.missing
    if missing is None:
        return ""
    cand, cur = missing.candidate, missing.current
    if not cand and not cur:
        return ""
    return (f"counting {cand} candidate and {cur} current runs that never reported as failed "
            f"(gate.reports.missing_runs)")


def concurrent_reason(evidence: Evidence, carried: Carried | None) -> str:
    """What the comparison over the rollout's cells found, for a rollback's reason."""
    stage = concurrent_of(evidence) or Comparison()
    found = (carried.concurrent if carried is not None else Comparison()).merge(stage)
    counted = missing_words(evidence)
    return (f"{found.candidate_events} of {found.candidate_n} candidate runs failed against "
            f"{found.current_events} of {found.current_n} current runs in the same "
            f"{found.cells} cells (minutes and stratum)" + (f", {counted}" if counted else ""))
