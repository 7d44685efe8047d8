"""The exact binomial tail behind McNemar: the same floats as the plain sum, in linear time."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.stats import statistics
from gatekeeper.stats.statistics import binomial_cdf_half, mcnemar_exact


def _plain_sum(k: int, n: int) -> float:
    """The quadratic reference: every term by math.comb, one exact division."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / (1 << n)


def test_every_tail_up_to_200_is_the_same_float_as_the_plain_sum() -> None:
    """Each P(X <= k), n <= 200, equals the exact sum's float (ties included)."""
    for n in range(201):
        for k in range(-1, n + 2):
            assert binomial_cdf_half(k, n) == _plain_sum(k, n), (k, n)


def test_random_large_tails_are_the_same_float_as_the_plain_sum() -> None:
    """Sampled (k, n) up to 3,000 pairs give the exact sum's float."""
    rng = random.Random(12)
    for _ in range(60):
        n = rng.randint(201, 3000)
        k = rng.choice([rng.randint(0, n), n // 2 + rng.randint(-40, 40)])
        assert binomial_cdf_half(k, n) == _plain_sum(k, n), (k, n)


def test_seed_002_mcnemar_figures_hold() -> None:
    """14 regressions against 5 improvements: 0.0318 one-sided, 0.0636 two-sided."""
    one, two = mcnemar_exact(14, 5)
    assert one == pytest.approx(0.0318, abs=5e-5) and two == pytest.approx(0.0636, abs=5e-5)


def test_a_large_tail_takes_one_binomial_coefficient(monkeypatch: pytest.MonkeyPatch) -> None:
    """40,500 discordant pairs cost one math.comb and O(sqrt(n)) term steps, not n combs."""
    calls: list[tuple[int, int]] = []
    real = math.comb

    def counting(n: int, k: int) -> int:
        calls.append((n, k))
        return real(n, k)

    monkeypatch.setattr(statistics.math, "comb", counting)
    one, two = mcnemar_exact(20_400, 20_100)
    assert len(calls) == 2  # one per tail: the one-sided and the two-sided look
    assert 0.05 < one < 0.1 and two == 2 * one
    calls.clear()
    assert binomial_cdf_half(20_000, 40_500) < 0.01
    assert len(calls) == 1
