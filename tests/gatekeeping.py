"""A gatekeeper in the test process against a live router: quick policies, roles, ticks.

For tests that drive rollouts with a real `gatekeeper.loop.Gatekeeper` over HTTP while a
`tests.population.Population` reports traces: approvals, graded responses, the pages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests

from gatekeeper.loop import Gatekeeper
from rolegate.http import ApiClient
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import wait_for

#: A gate that decides within seconds of healthy or broken traffic.
QUICK_GATE: dict[str, Any] = {
    "thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                   "min_stage_seconds": 0.2, "bake_seconds": 0.4},
    # Twenty runs could not show a drop of 0.05: no power hold (tests/test_power_hold.py).
    "power": None,
    "invariants": {"artifact_exists": ["out.md"]}}
#: A ladder whose second step waits for an operator's approval.
APPROVAL_STEPS = [0.3, {"share": 0.6, "approval": True}]
#: Every rule but `gate` (zero tolerance) answered by one response.
EVERY_RULE = ("drift", "shadow", "sequential", "criteria", "stage_end", "mcnemar", "vs_current",
              "units")


def put_canary(url: str, role: str, candidate: str, steps: list[Any],
               responses: dict[str, str] | None = None) -> None:
    """Create `role` on the first step of `steps` with QUICK_GATE (and `responses`)."""
    gate = {**QUICK_GATE, "responses": responses or {}}
    binding = {"current": "cfg-a", "candidate": candidate, "stage": "canary",
               "share": steps[0], "steps": steps, "gate": gate}
    requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                 timeout=5).raise_for_status()


def gate_view(url: str, role: str) -> dict[str, Any]:
    """GET /v1/roles/<role>/gate as a caller."""
    with requests.get(f"{url}/v1/roles/{role}/gate", headers=auth(CALLER), timeout=5) as r:
        r.raise_for_status()
        view: dict[str, Any] = r.json()
        return view


def binding(url: str, role: str) -> dict[str, Any]:
    """The role's current binding, as a caller reads it."""
    with requests.get(f"{url}/v1/bindings/{role}", headers=auth(CALLER), timeout=5) as r:
        r.raise_for_status()
        found: dict[str, Any] = r.json()["binding"]
        return found


@contextmanager
def keeper(url: str, holder: str, interval: float = 0.05) -> Iterator[Gatekeeper]:
    """A Gatekeeper ticking only when told (`tick_until`); releases its lease after.

    `interval` is only what its heartbeat says (a leader is late after three of them).
    """
    api = ApiClient(url, GATEKEEPER)
    gatekeeper = Gatekeeper(api, interval=interval, holder=holder)
    try:
        yield gatekeeper
    finally:
        gatekeeper.release()
        api.close()


def tick_until(gatekeeper: Gatekeeper, check: Callable[[], Any], what: str,
               timeout: float = 40) -> None:
    """Tick, then check, until `check()` is truthy; fail naming `what` after `timeout`."""
    def ticked() -> Any:
        gatekeeper.once()
        return check()
    wait_for(ticked, timeout, what, interval=0.1)
