"""What the fleet gets, read from the stores: GET /v1/fleet and the dashboard's overview.

The same figures `rolegate status` computes from the gate views it fetches
(`gatekeeper.stats.fleet`, `gatekeeper.stats.fleet_budget`), read here without
building whole gate views: per live rollout only its bound (the stage alpha
times its ladder's stages, from the binding) and when it began (a walk back
through the binding history, a page at a time, as the gate view's `rollout`
section finds it). With a fleet budget (the router's `ROLEGATE_FLEET_BUDGET`),
the advice: what each rollout's share is and which live roles are over it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bindings.store import BindingStore
from gatekeeper.stats.fleet import outlook
from gatekeeper.stats.fleet_budget import BUDGET_SOURCE, budget_advice
from gatekeeper.stats.rollout import rollout_alpha
from gatekeeper.store.rollout import RolloutReader
from gatekeeper.store.traces import TraceStore


def fleet_views(store: BindingStore, traces: TraceStore,
                visible: Callable[[str], bool] = lambda role: True) -> list[dict[str, Any]]:
    """Per visible role with a live rollout, the slice of its gate view the fleet reads:
    `role`, `stage`, `rollout {alpha, since}`, `policy.thresholds.alpha`."""
    reader = RolloutReader(store, traces)
    _, records = store.snapshot()
    out = []
    for role, record in sorted(records.items()):
        if not visible(role):
            continue
        found = reader.walk(record)
        if found is None:
            continue
        binding = record.binding
        out.append({"role": role, "stage": binding.stage.value,
                    "rollout": {"alpha": rollout_alpha(binding), "since": found.since},
                    "policy": {"thresholds": {"alpha": binding.gate.thresholds.alpha}}})
    return out


def fleet_report(store: BindingStore, traces: TraceStore, now: float,
                 budget_per_day: float | None,
                 visible: Callable[[str], bool] = lambda role: True) -> dict[str, Any]:
    """The fleet's outlook at `now` (`fleet`, and `text`: status's line) over the visible
    roles, and with a budget its advice (`budget`, and `budget_lines`); `roles`: the live
    rollouts read."""
    views = fleet_views(store, traces, visible)
    found = outlook(views, now)
    advice = None if budget_per_day is None else budget_advice(views, found, budget_per_day)
    return {"fleet": found.as_dict(), "text": found.text(),
            "budget": None if advice is None else {**advice.as_dict(), "source": BUDGET_SOURCE},
            "budget_lines": [] if advice is None else advice.lines(BUDGET_SOURCE),
            "roles": views}
