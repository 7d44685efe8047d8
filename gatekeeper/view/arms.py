"""The gate view's per-arm sections: each arm's verdict, and each arm against current."""

from __future__ import annotations

from typing import Any

from gatekeeper.gate import compare, evaluate
from gatekeeper.view.context import GateContext


def arms_section(ctx: GateContext) -> dict[str, Any]:
    """Per arm: its config and the gate's verdict, reasons and figures over the window."""
    policy = ctx.record.binding.gate
    return {arm: {"config": config, **evaluate(window, policy).to_json()}
            for arm, (config, window) in ctx.arms.items()}


def comparison_section(ctx: GateContext) -> dict[str, Any]:
    """Candidate and shadow pass rates against current's over the same period."""
    _, current = ctx.arms["current"]
    return {arm: compare(window, current).to_json()
            for arm, (_, window) in ctx.arms.items() if arm != "current"}
