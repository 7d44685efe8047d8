"""The gate view's `drift` section: CUSUM detectors per arm and metric (`gatekeeper.view.sections`).

Two shapes, as the section always had: `DriftOffView` when the policy turns drift
off (no parameters, no detectors), `DriftOnView` otherwise.
"""

from __future__ import annotations

from typing import Any, Literal

from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class DetectorView(Section):
    """One CUSUM detector (`stats.drift.Detector.as_dict`)."""

    metric: str
    p0: Number
    p1: Number
    k: Number
    h: Number
    n: int
    events: int
    s: Number
    alarm: bool
    alarms: int
    first_alarm_at: int | None
    first_alarm_id: str | None
    last_id: str | None
    #: Current runs p0 was measured over (0: the policy's fixed baseline).
    reference: int
    #: The rate those runs showed; p0 is its upper bound (null: a fixed baseline).
    observed: Number | None
    caught_up: bool


class AlarmView(Section):
    """A detector that fired: which arm, which metric."""

    arm: str
    metric: str


class DriftOffView(Section):
    """`drift` when the policy turns it off."""

    enabled: Literal[False]
    candidate: dict[str, DetectorView]
    current: dict[str, DetectorView]
    alarms: list[AlarmView]
    alert: bool


class DriftOnView(Section):
    """`drift`: each arm's detectors, the alarms, and whether current itself alarms."""

    enabled: Literal[True]
    shift: Number
    #: The policy's fixed h; null: each detector derives its own.
    h: Number | None
    candidate: dict[str, DetectorView]
    current: dict[str, DetectorView]
    alarms: list[AlarmView]
    #: False while a detector is still catching up with the stage's runs.
    caught_up: bool
    #: True when a detector on current alarms.
    alert: bool

    def detector(self, arm: str, metric: str) -> DetectorView | None:
        """The detector of `metric` on `arm` ("candidate" or "current"), if it has one."""
        return (self.candidate if arm == "candidate" else self.current).get(metric)


DriftView = DriftOnView | DriftOffView


def drift_view(section: dict[str, Any]) -> DriftView:
    """The model of a drift section's JSON (`stats.drift.section` or `disabled_view`).

    Trusted (the section's own builder made it): constructed, not validated.
    """
    fields: dict[str, Any] = {
        **section,
        **{arm: {metric: DetectorView.model_construct(**detector)
                 for metric, detector in section.get(arm, {}).items()}
           for arm in ("candidate", "current")},
        "alarms": [AlarmView.model_construct(**alarm) for alarm in section.get("alarms", [])]}
    model = DriftOnView if section.get("enabled") else DriftOffView
    return model.model_construct(**fields)
