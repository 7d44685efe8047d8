"""No policy value breaks the gate view: every three-digit p0 and extreme policies answer 200."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from bindings.models import DriftPolicy
from gatekeeper.stats.budget import cusum_arl0
from gatekeeper.stats.cusum_arl import chain_arl, lorden_h
from gatekeeper.stats.drift import MAX_P1, METRICS, derived_h
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


def _binding(drift: dict[str, Any], thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.1,
            "steps": [0.1, 0.5, 1.0],
            "gate": {"thresholds": thresholds or {}, "drift": drift}}


def _view(session: requests.Session, url: str, role: str, binding: dict[str, Any]) -> Any:
    created = session.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                          timeout=30)
    assert created.status_code == 201, created.text
    answer = session.get(f"{url}/v1/roles/{role}/gate", headers=auth(GATEKEEPER), timeout=60)
    assert answer.status_code == 200, (role, answer.status_code, answer.text[:300])
    return answer.json()


#: The 999 p0s in slices of 111: each slice is its own test, so parallel workers
#: share the sweep (each view solves its p0's h: about 20 ms of CPU a p0, at most 0.2 s).
P0_SLICES = [range(first, first + 111) for first in range(1, 1000, 111)]


def test_the_slices_cover_every_three_digit_p0_once() -> None:
    """The slices below hold 0.001-0.999, each once: together they are the whole sweep."""
    assert sorted(t for chunk in P0_SLICES for t in chunk) == list(range(1, 1000))


@pytest.mark.slow
@pytest.mark.parametrize("thousandths_range", P0_SLICES,
                         ids=lambda r: f"p0-{r.start:03d}-{r.stop - 1:03d}")
def test_every_three_digit_p0_gives_a_gate_view(live: str, thousandths_range: range) -> None:
    """p0 0.001-0.999 (all 999, a slice per test) as the fixed baseline of every detector:
    each view answers 200."""
    failed: list[tuple[float, int]] = []
    with requests.Session() as session:
        for thousandths in thousandths_range:
            p0 = thousandths / 1000
            role = f"p0-{thousandths:03d}"
            binding = _binding({"baseline": {metric: p0 for metric in METRICS}})
            session.put(f"{live}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                        timeout=30).raise_for_status()
            answer = session.get(f"{live}/v1/roles/{role}/gate", headers=auth(GATEKEEPER),
                                 timeout=60)
            if answer.status_code != 200:
                failed.append((p0, answer.status_code))
                continue
            detector = answer.json()["drift"]["candidate"]["run_failure"]
            assert detector["p0"] == p0 and detector["h"] > 0.0
    assert failed == []


def test_extreme_policies_give_a_gate_view(live: str) -> None:
    """A tiny or huge shift, a tiny or huge alpha, a p0 at either end: still a 200 view."""
    cases = [
        ({"shift": 1e-6, "baseline": {"run_failure": 0.5}}, None),
        ({"shift": 0.999, "baseline": {"run_failure": 0.5}}, None),
        ({"baseline": {"run_failure": 0.0}}, None),
        ({"baseline": {"run_failure": 1.0}}, None),
        ({"baseline": {"run_failure": 0.474}}, {"alpha": 1e-12}),
        ({"baseline": {"run_failure": 0.474}}, {"alpha": 0.999}),
    ]
    with requests.Session() as session:
        for index, (drift, thresholds) in enumerate(cases):
            view = _view(session, live, f"extreme-{index}", _binding(drift, thresholds))
            assert view["drift"]["enabled"] is True


def test_the_h_given_where_the_chain_is_too_large_keeps_the_budget() -> None:
    """Where the lattice chain would need too many states, h is Lorden's bound: still conservative."""
    policy = DriftPolicy()
    target = cusum_arl0(0.0025)
    for p0 in (0.175, 0.474, 0.96, 0.98, 0.998):
        h = derived_h(policy, p0, 0.0025)
        p1 = min(MAX_P1, p0 + policy.shift)
        assert math.isfinite(h) and h <= lorden_h(p0, (p0 + p1) / 2.0, target) + 1e-9
    # Where k is exactly on a lattice (0.925 = 37/40) the chain is the detector itself:
    # its exact ARL at Lorden's h reaches the target.
    h = lorden_h(0.9, 0.925, 1e5)
    assert chain_arl(0.9, 37, 40, math.floor(h * 40 + 1e-9)) >= 1e5
