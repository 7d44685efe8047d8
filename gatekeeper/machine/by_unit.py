"""What the unit test (`gatekeeper.stats.units`) does to a decision. Pure.

It rolls back: its verdict is valid at every look, whatever keys, retries,
outages or report lags do, so it is read right after the zero-tolerance gate
rule, before any hold. And it keeps the run-level tests honest: when units
carry several runs each, those tests count correlated runs as independent and
would blame a healthy candidate for a customer's bad day, so their verdicts
hold promotion (for a human, or for more evidence) but never roll back.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.view_model.units import UnitsView

#: decide()'s rules whose tests read runs as independent units.
RUN_LEVEL_RULES = frozenset({"drift", "sequential", "criteria", "stage_end", "vs_current"})


def unit_rejection(units: UnitsView | None) -> str | None:
    """The rollback reason when the unit test rejects the candidate, else None."""
    if units is None or not units.test.reject:
        return None
    return units.reason or "unit test rejected the candidate"


def repeats_hold(units: UnitsView | None, rule: str, reason: str) -> str | None:
    """The hold reason replacing a run-level rule's rollback when keys repeat, else None."""
    if units is None or rule not in RUN_LEVEL_RULES or not units.test.repeats:
        return None
    return (f"held: keys carry several runs each ({units.test.repeats_why}), so the "
            f"{rule} test, which reads runs as independent, holds promotion and does not "
            f"roll back: {reason}")


def unit_details(units: UnitsView | None) -> dict[str, Any]:
    """The unit test's figures for a decision's details."""
    return {} if units is None else {"units": units.test}
