"""What the report-rate check (the gate view's `reports` section) asks of decide(). Pure.

- ``short`` (the sequential test rejected): roll back, as gate.responses says for `reports`;
- ``both_short`` (current short too, a reporter gone): hold and alert, never roll back;
- ``lagging`` (under current's rate, no evidence yet): hold promotion;
- anything else: nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gatekeeper.stats.reports import BOTH_SHORT, LAGGING, SHORT
from gatekeeper.view_model.reports import ReportsView

ROLLBACK = "rollback"
HOLD = "hold"
ALERT = "alert"


def report_step(section: ReportsView | None) -> tuple[str, str] | None:
    """(rollback | hold | alert, reason) for the view's `reports` section; None: no effect."""
    if section is None:
        return None
    verdict, reason = section.verdict, section.reason
    if verdict == SHORT:
        return ROLLBACK, reason
    if verdict == BOTH_SHORT:
        return ALERT, reason
    if verdict == LAGGING:
        return HOLD, f"{reason}; waiting for evidence before promoting"
    return None


def report_decision(section: ReportsView | None, fail: Callable[..., Any],
                    hold: Callable[..., Any]) -> Any:
    """decide()'s answer to the `reports` section: `fail("reports", ...)` (roll back, or what
    gate.responses says), `hold(reason, ...)` (with the reason as an alert when no
    candidate could cause the shortfall), or None to go on."""
    step = report_step(section)
    if step is None:
        return None
    kind, reason = step
    if kind == ROLLBACK:  # the decision's details keep the section
        return fail("reports", reason, reports=section)
    held = hold(reason, reports=section)
    return dataclasses.replace(held, alerts=(*held.alerts, reason)) if kind == ALERT else held
