"""The gate view as a model: what `gate_view` returns, the router serialises and decide() reads.

One class per section, so the builder (`gatekeeper.view.build`), the API's JSON
(`GateView.model_dump(mode="json")`), its OpenAPI schema and the gatekeeper
(`gatekeeper.machine.evidence.evidence_from_view`) meet at one typed boundary
instead of string keys on both ends. The builder makes them with
`model_construct`: it built every value itself, and the view is made per role per
tick, so validating it again would buy nothing; a JSON view read back (the
gatekeeper's over HTTP, a test's) is validated with `GateView.model_validate`.

Every section is typed, one module per concern (`gatekeeper.view_model.<section>`);
what is still `dict[str, Any]` (a rule's definition, a judged criterion's regressions,
the pairwise judge's figures, a rollback entry's details) is a figure passed through
as its builder made it. Pure: the pure core imports it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from bindings.models import GatePolicy, Stage
from gatekeeper.view_model.arms import ArmView
from gatekeeper.view_model.comparison import ComparisonView, PreviousView
from gatekeeper.view_model.concurrent import ConcurrentView
from gatekeeper.view_model.criteria import ByCriterionView
from gatekeeper.view_model.drift import DriftView
from gatekeeper.view_model.judges import JudgesView
from gatekeeper.view_model.keeper import GatekeeperView
from gatekeeper.view_model.next import NextView
from gatekeeper.view_model.paired import PairedView
from gatekeeper.view_model.reports import ReportsView
from gatekeeper.view_model.rollout import RolloutView
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import DifferenceView, Number, UnitsView


class Window(Section):
    """`window`: the current stage's window (since when, how long, which epoch)."""

    since: Number | None
    seconds: Number | None
    epoch: str


class GateHeader(BaseModel):
    """What every gate view opens with: the role's stage, arms' configs, window and policy."""

    # Every field is served, null or not: the OpenAPI schema (serialization mode) requires
    # each, defaults or not. An infinite figure in a section stays one (`Section`).
    model_config = ConfigDict(extra="ignore", json_schema_serialization_defaults_required=True,
                              ser_json_inf_nan="constants")

    role: str
    version: int
    stage: Stage
    share: float
    paused: bool
    current: str
    candidate: str | None
    window: Window
    policy: GatePolicy
    #: The router's clock when it built the view (Redis TIME): stage ages are read on it.
    time: Number

    def as_json(self) -> dict[str, Any]:
        """The JSON the API serves (null sections included)."""
        return self.model_dump(mode="json")


class RuleView(GateHeader):
    """GET /v1/roles/<role>/gate?rule=R: the gate over the runs one targeting rule routed."""

    #: The rule: its id and its definition as the binding holds it.
    rule: dict[str, Any]
    arms: dict[str, ArmView]
    comparison: dict[str, ComparisonView]
    #: Always null: the gatekeeper decides on the whole stage, not on one rule's slice.
    next: None = None


class GateView(GateHeader):
    """GET /v1/roles/<role>/gate: the gate over the role's current stage, every section."""

    #: arm -> its config, the gate's verdict, reasons and figures (`gatekeeper.view.arms`).
    arms: dict[str, ArmView]
    #: arm -> against current over the same period (`arms.comparison_section`).
    comparison: dict[str, ComparisonView]
    by_criterion: ByCriterionView | None = None
    judges: JudgesView | None = None
    reports: ReportsView | None = None
    paired: PairedView | None = None
    drift: DriftView | None = None
    concurrent: ConcurrentView | None = None
    rollout: RolloutView | None = None
    units: UnitsView | None = None
    difference: list[DifferenceView] | None = None
    previous: PreviousView | None = None
    gatekeeper: GatekeeperView | None = None
    #: What the gatekeeper does next (`gatekeeper.machine.next_step`); set last.
    next: NextView | None = None
