"""The sequential McNemar test: rejects lopsided flips, and keeps alpha over repeated looks."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.sequential import THETAS, flip_test, flips_of, log_ratio
from gatekeeper.statistics import mcnemar_exact


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
    """The log ratio is the log of the mean of each theta's likelihood ratio."""
    r, i = 14, 5
    mean = sum((2 * t) ** r * (2 * (1 - t)) ** i for t in THETAS) / len(THETAS)
    assert log_ratio(r, i) == pytest.approx(math.log(mean))


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
