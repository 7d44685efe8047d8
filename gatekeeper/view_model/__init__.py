"""The gate view's model: one class per section, shared by its builder and its readers.

Pure (no Redis, no Flask): the builder (`gatekeeper.view`) makes it, the router
serialises it, and the pure core (`gatekeeper.machine`) reads it by attribute;
`gatekeeper.view` re-exports `GateView`.
"""

from __future__ import annotations

from gatekeeper.view_model.arms import ArmView, ReasonView, arm_view, arms_view
from gatekeeper.view_model.comparison import ComparisonView, PreviousView
from gatekeeper.view_model.concurrent import ConcurrentView, concurrent_view
from gatekeeper.view_model.criteria import ByCriterionView, CriterionKeyView, criteria_view
from gatekeeper.view_model.drift import (
    AlarmView,
    DetectorView,
    DriftOffView,
    DriftOnView,
    DriftView,
    drift_view,
)
from gatekeeper.view_model.judges import JudgesView
from gatekeeper.view_model.keeper import GatekeeperView, HolderView
from gatekeeper.view_model.next import DeadlineView, NextView, ResponseView, WaitView
from gatekeeper.view_model.paired import PairedView, paired_view
from gatekeeper.view_model.reports import ReportsView, reports_view
from gatekeeper.view_model.rollout import CarriedView, EarlierStageView, FlipsView, RolloutView
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import (
    DifferenceView,
    StretchView,
    UnitArmView,
    UnitLimitsView,
    UnitMetricView,
    UnitsView,
    UnitTestView,
)
from gatekeeper.view_model.view import GateHeader, GateView, RuleView, Window

__all__ = ["ByCriterionView", "ComparisonView", "ConcurrentView", "CriterionKeyView", "JudgesView",
           "PairedView", "PreviousView", "ReportsView", "concurrent_view", "criteria_view",
           "paired_view", "reports_view", "GatekeeperView", "HolderView", "ArmView", "ReasonView", "arm_view", "arms_view", "AlarmView", "DetectorView", "DriftOffView", "DriftOnView", "DriftView", "drift_view",
           "CarriedView", "EarlierStageView", "FlipsView", "RolloutView", "DeadlineView", "DifferenceView", "GateHeader", "GateView", "NextView",
           "ResponseView", "RuleView", "Section", "StretchView", "UnitArmView",
           "UnitLimitsView", "UnitMetricView", "UnitTestView", "UnitsView", "WaitView", "Window"]
