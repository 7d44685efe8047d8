"""The shipped gate, simulated through the gate view's and the gatekeeper's own functions.

Small and seeded (each rollout here ends at its first rollback, or runs the
ladder without the time holds), so it runs in seconds and fails when the
statistics regress; `python -m bench.rollout_sim` runs the full tables.
"""

from __future__ import annotations

import dataclasses

import pytest

from bench import report_sim
from bench.rollout_scenarios import paired_bound
from bench.rollout_sim import (
    batch,
    policy_for,
    runs_to_rollback,
)
from bench.sim_core import World, plain_rule
from bindings.models import Thresholds


def test_healthy_candidates_are_not_rolled_back_at_any_base_rate() -> None:
    """At base 0.50, 0.80, 0.95 and 0.99 a healthy candidate reaches stable (shipped alpha)."""
    assert Thresholds().alpha == 0.0025
    back = 0
    for base in (0.50, 0.80, 0.95, 0.99):
        world = World(base=base, policy=policy_for(base, hold=False), interval=30.0)
        outcomes = batch(world, base, 15, seed=3)
        assert all(o.stage in ("stable", "shadow", "canary", "full") for o in outcomes)
        back += sum(o.rolled_back for o in outcomes)
    assert back <= 1  # 60 rollouts; the budget is at most 1% each


def test_a_candidate_at_half_its_runs_is_rolled_back_within_40_runs() -> None:
    """From a 0.95 current with the shipped hold, pass rate 0.5 is caught in shadow inside
    40 runs, on the paired flips alone (no p0 from history: 30 with one, before issue 23)."""
    world = World(base=0.95, policy=policy_for(0.95, hold=True))
    outcomes = batch(world, 0.5, 20, seed=5)
    assert all(o.rolled_back and o.runs <= 40 and o.served == 0 for o in outcomes)


def test_large_drops_are_caught_near_the_information_bound() -> None:
    """A 0.20 drop from 0.95 and from 0.99: caught in shadow, median runs within 1.5x of
    the bound of the test run there (shadow's paired flips, `paired_bound`).

    (Against the one-sample bound of a known p0, which no test without one can reach,
    `python -m bench.rollout_scenarios` prints both.)
    """
    for base in (0.95, 0.99):
        q = round(base - 0.20, 2)
        # A read a second (one job each): runs are counted, not the read schedule.
        world = World(base=base, policy=policy_for(base, hold=True), interval=1.0)
        outcomes = batch(world, q, 25, seed=7)
        median = runs_to_rollback(outcomes)
        assert all(o.stage == "shadow" for o in outcomes)
        assert median <= 1.5 * paired_bound(base, q), (base, median)


def test_the_seed_plain_policy_rolls_back_healthy_candidates() -> None:
    """Seed 000's last-5-runs check, same traffic: it rolls back a healthy 0.95 candidate."""
    world = World(base=0.95, policy=policy_for(0.95, hold=False), interval=30.0)
    outcomes = batch(world, 0.95, 10, seed=3, rule=plain_rule(5))
    assert sum(o.rolled_back for o in outcomes) >= 8


def test_a_small_drop_is_caught_in_shadow_by_the_power_hold() -> None:
    """0.75 against 0.80, judged against concurrent current: shadow holds until its flips
    could have caught a drop of 0.05 (`gate.power`), so nearly every such candidate is
    rolled back there, before a user sees it; with the hold off most reach users first."""
    world = World(base=0.80, policy=policy_for(0.80, hold=True))
    held = batch(world, 0.75, 21, seed=9)
    assert sum(o.rolled_back and o.stage == "shadow" for o in held) >= 18, held
    off = policy_for(0.80, hold=True).model_copy(update={"power": None})
    timed = batch(dataclasses.replace(world, policy=off), 0.75, 21, seed=9)
    assert sum(o.rolled_back and o.stage == "shadow" for o in timed) <= 10, timed


def test_the_report_rate_table_stays_in_budget_and_catches_missing_reports(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench.report_sim: no healthy rollout rolled back by the report test in 60; a candidate
    missing 30% of its reports caught in every one of 20."""
    report_sim.main(["--rollouts", "60", "--regressed", "20", "--seed", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("1.00") and "0/60" in line for line in lines), lines
    caught = next(line for line in lines if line.startswith("1.00") and "30%" in line)
    assert caught.split()[2] == "100%", caught
