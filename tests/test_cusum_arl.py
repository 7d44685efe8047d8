"""CUSUM run lengths by the Markov chain, and h derived from an in-control ARL target."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from bindings.models import DriftPolicy
from gatekeeper.stats.budget import (
    CUSUM_DETECTORS,
    CUSUM_HORIZON_RUNS,
    CUSUM_SHARE,
    cusum_arl0,
)
from gatekeeper.stats.cusum_arl import arl, chain_arl, chain_arls, h_for_arl, lattice
from gatekeeper.stats.drift import METRICS, bounded_p0, derived_h, params_for
from gatekeeper.stats.statistics import Cusum
from gatekeeper.window import WindowStats


def test_the_audit_figure_for_the_old_default_is_reproduced() -> None:
    """Shift 0.05, h 5 at a 0.05 failure rate: in-control ARL 3,673 (k = 3/40 exactly)."""
    assert chain_arl(0.05, 3, 40, 200) == pytest.approx(3673.06, abs=0.05)


def test_chain_arl_matches_a_simulated_detector() -> None:
    """The real detector's mean run length sits at or just above the chain's (seeded)."""
    p0, p1 = 0.1, 0.2
    h = h_for_arl(p0, p1, 300.0)
    rng = random.Random(7)
    lengths = []
    for _ in range(3000):
        detector, n = Cusum(p0=p0, p1=p1, h=h), 0
        while True:
            n += 1
            if detector.update(rng.random() < p0):
                break
        lengths.append(n)
    mean = sum(lengths) / len(lengths)
    assert arl(p0, p0, p1, h) >= 300.0
    assert 0.93 * arl(p0, p0, p1, h) <= mean <= 1.15 * arl(p0, p0, p1, h)


def test_h_is_the_smallest_that_reaches_the_target() -> None:
    """One lattice step lower misses the ARL target; the h found reaches it."""
    for p0 in (0.01, 0.05, 0.2, 0.5):
        p1 = p0 + 0.05
        a, m = lattice((p0 + p1) / 2)
        h = h_for_arl(p0, p1, 1e5)
        assert chain_arl(p0, a, m, round(h * m)) >= 1e5
        assert chain_arl(p0, a, m, round(h * m) - 1) < 1e5


def test_one_elimination_gives_every_tops_arl_as_its_own_solve() -> None:
    """chain_arls' running ARLs are chain_arl's, top by top, up and down the lattice."""
    for p, a, m in ((0.05, 3, 40), (0.316, 15, 44), (0.9, 10, 11), (0.0123, 1, 27), (0.5, 13, 25)):
        running = list(itertools.islice(chain_arls(p, a, m), 400))
        for top in (0, 1, 2, a, m - a, m, 97, 251, 399):
            assert running[top] == pytest.approx(chain_arl(p, a, m, top), rel=1e-12), (p, top)
    # An event-free chain never alarms: the ARL is infinite at every top, as chain_arl's.
    assert list(itertools.islice(chain_arls(0.0, 3, 40), 3)) == [math.inf] * 3


#: h at the shipped target (stage alpha 0.0025, shift 0.05) as the secant search over
#: separate solves found it: one elimination must find the very same (the yardstick of
#: every drift alarm), the hardest p0s included (0.316 and 0.491: 0.5-0.9 CPU-s each then).
SHIPPED_H = {0.0017: 3.5526315789473686, 0.0123: 7.592592592592593,
             0.141: 40.74418604651163, 0.302: 71.42857142857143, 0.316: 59.31818181818182,
             0.491: 68.0, 0.9: 28.14305910619685, 0.95: 11.664293928967728}


def test_h_at_the_shipped_target_is_the_smallest_top_that_reaches_it() -> None:
    """Each shipped h is unchanged, and is the lowest lattice top whose own solve reaches
    ARL0 (or Lorden's bound, where the chain would drift up or need too many states)."""
    target = cusum_arl0(0.0025)
    for p0, expected in SHIPPED_H.items():
        p1 = min(0.999, p0 + 0.05)
        h = h_for_arl(p0, p1, target)
        assert h == expected, p0
        a, m = lattice((p0 + p1) / 2)
        top = round(h * m)
        if h == top / m:  # a lattice top, not Lorden's bound
            assert chain_arl(p0, a, m, top) >= target > chain_arl(p0, a, m, top - 1), p0


def test_derived_h_depends_on_the_base_rate_and_keeps_the_false_alarm_budget() -> None:
    """The same shift gets a different h at each p0, each with the same in-control ARL."""
    policy = DriftPolicy()
    target = cusum_arl0(0.0025)
    hs = {p0: derived_h(policy, p0, 0.0025) for p0 in (0.01, 0.05, 0.2, 0.5)}
    assert len(set(hs.values())) == 4
    for p0, h in hs.items():
        assert arl(p0, p0, p0 + policy.shift, h) >= target
    assert derived_h(DriftPolicy(h=5.0), 0.2, 0.0025) == 5.0


def test_p0_is_taken_at_its_upper_bound_over_the_reference() -> None:
    """A rate measured over few runs is bounded up far more than one over thousands."""
    few, many = bounded_p0(0.05, 40), bounded_p0(0.05, 5000)
    assert few > many > 0.05
    assert many < 0.06
    params = params_for("run_failure", DriftPolicy(),
                        WindowStats({"n": 5000, "passes": 4750}), 50, 0.0025)
    assert params is not None and params.p0 == many and params.observed == 0.05


def test_bad_arguments_are_refused() -> None:
    """p0 must be under p1 and the target over one run."""
    with pytest.raises(ValueError):
        h_for_arl(0.2, 0.1, 100.0)
    with pytest.raises(ValueError):
        h_for_arl(0.1, 0.2, 1.0)
    with pytest.raises(ValueError):
        lattice(0.0)


def test_the_candidates_cusums_split_the_cusum_share() -> None:
    """run_failure, tool_error and forbidden_call together stay within CUSUM_SHARE of alpha."""
    assert len(METRICS) == CUSUM_DETECTORS
    alpha, policy = 0.0025, DriftPolicy()
    p0s = {"run_failure": 0.1, "tool_error": 0.05, "forbidden_call": 0.01}
    # A stage of CUSUM_HORIZON_RUNS runs alarms falsely with chance about horizon / ARL0
    # per detector; any one alarm rolls back, so the three add up (a union bound).
    spent = sum(CUSUM_HORIZON_RUNS / arl(p0, p0, p0 + policy.shift, derived_h(policy, p0, alpha))
                for p0 in p0s.values())
    assert set(p0s) == set(METRICS)
    assert spent <= CUSUM_SHARE * alpha
