"""The sequential McNemar test: rejects lopsided flips, and keeps alpha over repeated looks."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.stats.sequential import (
    THETA_WEIGHTS,
    THETAS,
    flip_test,
    flips_of,
    log_ratio,
    rate_log_ratio,
    rate_test,
    upper_p0,
)
from gatekeeper.stats.statistics import mcnemar_exact


def test_lopsided_flips_reject_and_balanced_do_not() -> None:
    """Twenty regressions and no improvement reject at 0.01; fifty of each do not."""
    assert flip_test(20, 0, alpha=0.01).reject
    balanced = flip_test(50, 50, alpha=0.01)
    assert not balanced.reject and balanced.log_ratio < 0
    assert balanced.threshold == pytest.approx(math.log(100))


def test_no_flips_is_no_evidence() -> None:
    """With no discordant pairs the likelihood ratio is exactly 1."""
    assert log_ratio(0, 0) == pytest.approx(0.0)


def test_mixture_matches_its_definition() -> None:
    """The log ratio is the log of the weighted mean of each theta's likelihood ratio."""
    r, i = 14, 5
    assert sum(THETA_WEIGHTS) == pytest.approx(1.0)
    mean = sum(w * (2 * t) ** r * (2 * (1 - t)) ** i for t, w in zip(THETAS, THETA_WEIGHTS))
    assert log_ratio(r, i) == pytest.approx(math.log(mean))
    equal = sum((2 * t) ** r * (2 * (1 - t)) ** i for t in (0.6, 0.9)) / 2
    assert log_ratio(r, i, thetas=(0.6, 0.9)) == pytest.approx(math.log(equal))


def test_bad_inputs_are_refused() -> None:
    """Negative counts, an alpha outside (0, 1) and a theta at or below 1/2 raise."""
    with pytest.raises(ValueError):
        log_ratio(-1, 0)
    with pytest.raises(ValueError):
        flip_test(1, 1, alpha=1.0)
    with pytest.raises(ValueError):
        log_ratio(1, 1, thetas=(0.5,))


def test_flips_read_from_the_paired_report() -> None:
    """flips_of reads the report's flip counts, and 0/0 from a report without them."""
    assert flips_of({"flips": {"pass_to_fail": 7, "fail_to_pass": 2}}) == (7, 2)
    assert flips_of({"verdict": "insufficient"}) == (0, 0)


def _first_alarm(flips: list[bool], alarm: object) -> bool:
    r = i = 0
    for n, regressed in enumerate(flips, 1):
        r += regressed
        i += not regressed
        if alarm(r, i, n):  # type: ignore[operator]
            return True
    return False


def test_repeated_looks_keep_alpha_where_a_repeated_exact_test_does_not() -> None:
    """Under no difference, looking after every flip alarms at most alpha of the time.

    The same streams read with the one-look exact McNemar p-value every 10 flips
    alarm far more often than alpha: that is why shadow's running check is sequential.
    """
    alpha, streams, length = 0.05, 600, 200
    rng = random.Random(7)
    runs = [[rng.random() < 0.5 for _ in range(length)] for _ in range(streams)]
    sequential = sum(_first_alarm(s, lambda r, i, n: flip_test(r, i, alpha).reject)
                     for s in runs) / streams
    naive = sum(_first_alarm(s, lambda r, i, n: n % 10 == 0 and mcnemar_exact(r, i)[0] < alpha)
                for s in runs) / streams
    assert sequential <= alpha
    assert naive > 2 * alpha


def test_rate_test_rejects_a_clear_rise_and_not_the_baseline() -> None:
    """30 failures in 100 against p0 0.05 reject at 0.001; 5 in 100 do not."""
    assert rate_test(30, 100, 0.05, alpha=0.001).reject
    steady = rate_test(5, 100, 0.05, alpha=0.001)
    assert not steady.reject and steady.log_ratio < 0


def test_rate_test_refuses_bad_counts() -> None:
    """More failures than runs, or a p0 outside (0, 1), raise."""
    with pytest.raises(ValueError):
        rate_log_ratio(5, 4, 0.05)
    with pytest.raises(ValueError):
        rate_log_ratio(1, 4, 0.0)


def test_rate_test_keeps_alpha_over_every_look() -> None:
    """Candidates failing exactly at p0, read after every run, alarm at most alpha of the time."""
    alpha, streams, length, p0 = 0.05, 400, 400, 0.05
    rng = random.Random(11)
    alarms = 0
    for _ in range(streams):
        failures = 0
        for n in range(1, length + 1):
            failures += rng.random() < p0
            if rate_test(failures, n, p0, alpha).reject:
                alarms += 1
                break
    assert alarms / streams <= alpha


def test_upper_p0_is_conservative_and_tightens_with_runs() -> None:
    """The bound sits above p0, far above it on 20 runs and close to it on 20,000."""
    assert upper_p0(0.05, 0) == 0.05
    assert upper_p0(0.001, 20) > 0.1
    assert 0.05 < upper_p0(0.05, 20_000) < 0.054


def test_the_small_shift_sees_a_rise_the_larger_ones_miss() -> None:
    """p0 0.50, failing 0.525 over 10,000 runs: the 0.025 shift (weight 0.1) rejects it at
    0.0001, a mixture of 0.05, 0.1 and 0.2 alone has no evidence; bad weights are refused."""
    failures, n = 5250, 10_000
    assert rate_log_ratio(failures, n, 0.5) > math.log(1 / 0.0001)
    assert rate_log_ratio(failures, n, 0.5, shifts=(0.05, 0.1, 0.2)) < 0.0
    with pytest.raises(ValueError):
        rate_log_ratio(1, 10, 0.5, shifts=(0.05, 0.1), weights=(0.5, 0.6))
