"""The always-valid interval: it covers the true rate at every look at once, Wilson does not."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.stats.confidence import confidence_sequence, log_mixture_ratio
from gatekeeper.stats.statistics import Z_95, wilson_interval

PATHS = 400
RUNS = 1000


def test_interval_is_the_set_the_martingale_has_not_rejected() -> None:
    """Each bound sits where the mixture martingale crosses ln(1/alpha)."""
    bound = math.log(20)
    for successes, n in ((90, 100), (3, 40), (999, 1000), (17, 17)):
        low, high = confidence_sequence(successes, n)
        assert low <= successes / n <= high
        for edge, outside in ((low, low - 1e-6), (high, high + 1e-6)):
            if 0.0 < edge < 1.0:
                assert log_mixture_ratio(successes, n, edge) < bound
                assert log_mixture_ratio(successes, n, outside) >= bound
    assert confidence_sequence(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        confidence_sequence(5, 4)


def test_it_is_wider_than_wilson_by_what_it_costs() -> None:
    """Contains the one-look interval, at 1.5-2.2 times its width from 100 to 10,000 runs."""
    for n in (100, 1000, 10_000):
        s = int(0.9 * n)
        low, high = confidence_sequence(s, n)
        w_low, w_high = wilson_interval(s, n, Z_95)
        assert low < w_low and w_high < high
        assert 1.5 < (high - low) / (w_high - w_low) < 2.2


def test_every_look_at_once_covers_at_95_percent_and_wilson_does_not() -> None:
    """Over 400 paths of 1,000 runs at p = 0.9, read after every run: the sequence misses the
    truth on at most 5% of paths (Ville); Wilson, read the same way, misses on far more."""
    rng = random.Random(7)
    p = 0.9
    bound = math.log(20)
    cs_missed = wilson_missed = 0
    for _ in range(PATHS):
        successes = 0
        cs_out = wilson_out = False
        for n in range(1, RUNS + 1):
            successes += rng.random() < p
            if not cs_out and log_mixture_ratio(successes, n, p) >= bound:
                cs_out = True
            if not wilson_out and n >= 10:
                low, high = wilson_interval(successes, n, Z_95)
                wilson_out = not low <= p <= high
        cs_missed += cs_out
        wilson_missed += wilson_out
    assert cs_missed / PATHS <= 0.05
    assert wilson_missed / PATHS >= 0.2
