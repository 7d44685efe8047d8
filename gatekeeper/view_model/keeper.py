"""The gate view's `gatekeeper` section: is a gatekeeper there to act (`heartbeat.summarize`)."""

from __future__ import annotations

from pydantic import Field

from gatekeeper.heartbeat import ABSENT, LATE, OK
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class HolderView(Section):
    """One gatekeeper process heard from lately."""

    holder: str | None
    leader: bool
    dry_run: bool
    age_s: Number


class GatekeeperView(Section):
    """The heartbeat summary: the leading gatekeeper, how long since its tick, its errors."""

    status: str = Field(json_schema_extra={"enum": [OK, LATE, ABSENT]})
    leader: str | None
    last_tick: Number | None
    age_s: Number | None
    interval_s: Number | None
    late_after_s: Number
    roles_judged: int | None
    errors: list[str]
    holders: list[HolderView]
    #: The summary in words (`rolegate status`, the dashboard).
    text: str
