"""The candidate-vs-concurrent-current test: exact level, shared shifts, strata, the CUSUM."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.stats.concurrent import (
    BUCKET_S,
    GRACE_S,
    RISKS,
    Cell,
    Comparison,
    bucket_of,
    cell_logs,
    cells_of,
    closed_before,
    concurrent_test,
    cusum,
    cusum_h,
)


def _hypergeometric(cn: int, kn: int, events: int) -> list[tuple[int, float]]:
    total = math.comb(cn + kn, events)
    return [(y, math.comb(cn, y) * math.comb(kn, events - y) / total)
            for y in range(max(0, events - kn), min(events, cn) + 1)]


@pytest.mark.parametrize(("cn", "kn", "events"), [(3, 27, 2), (5, 5, 7), (50, 450, 40),
                                                  (1, 19, 20), (200, 10, 100)])
def test_each_cells_ratio_has_expectation_one_under_the_null(cn: int, kn: int,
                                                             events: int) -> None:
    """Given the cell's margins the candidate's events are hypergeometric under the null:
    the expectation of every ratio of the mixture is exactly 1 (so the product is a martingale)."""
    law = _hypergeometric(cn, kn, events)
    for i, _ in enumerate(RISKS):
        mean = sum(p * math.exp(cell_logs(Cell(cn, y, kn, events - y))[i]) for y, p in law)
        assert mean == pytest.approx(1.0, rel=1e-9)


def test_a_better_candidate_keeps_the_expectation_under_one() -> None:
    """Candidate events stochastically fewer than the null's: every ratio averages below 1."""
    law = _hypergeometric(10, 90, 20)
    # Tilt toward fewer candidate events (odds ratio 0.5).
    weights = [(y, p * 0.5 ** y) for y, p in law]
    total = sum(w for _, w in weights)
    for i, _ in enumerate(RISKS):
        mean = sum(w / total * math.exp(cell_logs(Cell(10, y, 90, 20 - y))[i])
                   for y, w in weights)
        assert mean < 1.0


def _bucket(rng: random.Random, share: float, jobs: int, p_cand: float, p_cur: float,
            bucket: int) -> Cell:
    cn = ce = kn = ke = 0
    for _ in range(jobs):
        if rng.random() < share:
            cn += 1
            ce += rng.random() < p_cand
        else:
            kn += 1
            ke += rng.random() < p_cur
    return Cell(cn, ce, kn, ke, bucket)


def test_a_shared_outage_is_not_the_candidates_fault() -> None:
    """Every run of both arms fails for ten buckets: no evidence against the candidate;
    the same outage on the candidate alone rejects within the outage."""
    rng = random.Random(7)
    shared = [_bucket(rng, 0.1, 30, 1.0 if 5 <= b < 15 else 0.05,
                      1.0 if 5 <= b < 15 else 0.05, b) for b in range(40)]
    test = concurrent_test(shared, alpha=0.008)
    assert not test.reject
    assert test.log_e < 1.0
    alone = [_bucket(rng, 0.1, 30, 1.0 if 5 <= b < 15 else 0.05, 0.05, b) for b in range(40)]
    assert concurrent_test(alone[:15], alpha=0.008).reject


def test_a_stratum_one_arm_serves_carries_no_evidence() -> None:
    """A rule sends the hard tenant (failing half its runs) wholly to the candidate: those
    cells have no current runs, so nothing is compared with another population."""
    hard = [Cell(30, 15, 0, 0, b, "hard-tenant") for b in range(100)]
    easy = [Cell(3, 0, 27, 1, b, "") for b in range(100)]
    test = concurrent_test(hard + easy, alpha=0.008)
    assert test.comparison.cells == 100 and not test.reject
    assert test.comparison.candidate_n == 300  # the hard tenant's runs are not counted


def test_worse_in_every_stratum_is_caught_in_the_bucketed_stratum() -> None:
    """A candidate worse in every tenant, that a rule sends the easy tenant: the bucketed
    jobs (every tenant, both arms) still show it worse."""
    rng = random.Random(3)
    easy = [Cell(20, 0, 0, 0, b, "easy") for b in range(200)]
    bucketed = [_bucket(rng, 0.1, 30, 0.15, 0.05, b) for b in range(200)]
    assert concurrent_test(easy + bucketed, alpha=0.008).reject


def test_level_holds_over_every_look_with_a_drifting_world() -> None:
    """Healthy candidates in a world whose failure rate wanders (0.02-0.5): read after
    every bucket, the e-value ever reaches 1/alpha in few rollouts (alpha 0.05 here)."""
    rng = random.Random(11)
    alpha, rejected, rollouts = 0.05, 0, 300
    for _ in range(rollouts):
        comparison = Comparison()
        for b in range(120):
            p = 0.02 + 0.48 * (0.5 + 0.5 * math.sin(b / 9.0)) ** 3
            comparison = comparison.merge(Comparison.of([_bucket(rng, 0.2, 20, p, p, b)]))
            if comparison.log_e() >= math.log(1 / alpha):
                rejected += 1
                break
    assert rejected / rollouts <= alpha


def test_a_tenfold_rare_failure_is_found() -> None:
    """Base 0.999, candidate 0.99 at a 10% share: rejected, no p0 needed."""
    rng = random.Random(5)
    cells = [_bucket(rng, 0.1, 300, 0.01, 0.001, b) for b in range(60)]
    assert concurrent_test(cells, alpha=0.008).reject


def test_comparison_round_trips_and_merges() -> None:
    """What a finished stage carries reads back as it was written, and sums with the next."""
    one = Comparison.of([Cell(5, 2, 45, 1, 1), Cell(4, 0, 40, 3, 2)])
    back = Comparison.from_dict(one.as_dict())
    assert back.logs == pytest.approx(one.logs, abs=1e-6)
    assert (back.cells, back.candidate_n, back.current_events) == (2, 9, 4)
    both = one.merge(Comparison.of([Cell(5, 5, 5, 0, 3)]))
    assert both.log_e() > one.log_e() and both.cells == 3
    assert Comparison.from_dict(None) == Comparison()
    assert Comparison.from_dict({"logs": [1.0]}) == Comparison()


def test_cells_pair_the_arms_by_bucket_and_stratum_and_wait_for_closed_buckets() -> None:
    """Cells join both arms' counts on (bucket, stratum); open buckets are left out."""
    cand = {(10, ""): (3, 1), (11, ""): (2, 0), (10, "r"): (5, 5)}
    cur = {(10, ""): (27, 2), (12, ""): (30, 1)}
    cells = cells_of(cand, cur, before=12)
    assert [(c.bucket, c.stratum, c.candidate_n, c.current_n) for c in cells] == [
        (10, "", 3, 27), (10, "r", 5, 0), (11, "", 2, 0)]
    assert bucket_of(10 * BUCKET_S + 1.0) == 10
    assert closed_before(11 * BUCKET_S + GRACE_S) == 11
    with pytest.raises(ValueError):
        Cell(1, 2, 3, 0)


def test_cusum_alarms_on_a_late_change_and_not_on_a_shared_one() -> None:
    """Healthy for 300 buckets then the candidate fails 4x: the CUSUM alarms after the
    change; a shared rise of both arms leaves it quiet."""
    rng = random.Random(2)
    h = cusum_h(0.001, 10_000)
    assert h == pytest.approx(math.log(1e7))
    late = [_bucket(rng, 0.3, 40, 0.05 if b < 300 else 0.2, 0.05, b) for b in range(500)]
    state = cusum(late, h)
    assert state.alarm and state.alarm_bucket is not None and state.alarm_bucket >= 300
    shared = [_bucket(rng, 0.3, 40, 0.05 if b < 300 else 0.4, 0.05 if b < 300 else 0.4, b)
              for b in range(500)]
    assert not cusum(shared, h).alarm
    with pytest.raises(ValueError):
        cusum_h(0.0, 10)
