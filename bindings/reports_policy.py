"""What a role's gate does with runs that were assigned but never reported (`gate.reports`).

Pure data, kept beside `bindings.models` (which imports it into `GatePolicy`) so
each stays one concern; `gatekeeper.stats.missing` applies it and the gate
view's `reports` and `concurrent` sections show it.

Experimentation platforms compute a metric over every exposed unit, so a unit
that never produced the event counts as not having it; progressive delivery's
most asked rule is "no data is a failure". Here that is `missing_runs: "fail"`
(the default): once a bucket of runs is past `grace_seconds` (runs still in
flight are not missing), its runs assigned but never reported count as failed
runs in the candidate-against-current comparison, in both arms alike, so a
reporter outage that hits both is no evidence. `"ignore"` judges the runs that
arrived alone (the report-rate test still compares the arms' report rates).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rolegate.trace import JsonNumber

#: Seconds after a report bucket ends before its runs are expected to have reported.
DEFAULT_GRACE_S = 120.0
#: The longest grace a policy may ask for (a day: agents that run for hours).
MAX_GRACE_S = 86_400.0


class ReportsPolicy(BaseModel):
    """Runs assigned but never reported: counted as failed, or ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: "fail": a mature bucket's missing runs (assigned minus reported, floored at 0)
    #: are failed runs of their arm in the comparison with current and the pass
    #: rates shown; "ignore": only the runs that arrived are judged.
    missing_runs: Literal["fail", "ignore"] = "fail"
    #: Seconds after a 30 s bucket ends before a run of it that has not reported is
    #: missing rather than in flight: set it above the agent's slowest ordinary run.
    grace_seconds: JsonNumber = Field(DEFAULT_GRACE_S, gt=0.0, le=MAX_GRACE_S)
