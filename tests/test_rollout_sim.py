"""The shipped gate, simulated through the gate view's and the gatekeeper's own functions.

Small and seeded (each rollout here ends at its first rollback, or runs the
ladder without the time holds), so it runs in seconds and fails when the
statistics regress; `python -m bench.rollout_scenarios` runs the full tables.
The gatekeeper reads after every run unless a test says otherwise.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from bench import report_sim
from bench.rollout_sim import (
    batch,
    policy_for,
    runs_to_rollback,
)
from bench.sim_bounds import paired_bound
from bench.sim_core import Shock, Tenant, World, plain_rule, rollout
from bindings.models import DriftPolicy, GatePolicy, Thresholds
from bindings.power_policy import PowerPolicy
from gatekeeper.stats import concurrent


@pytest.mark.slow
def test_healthy_candidates_are_not_rolled_back_at_any_base_rate() -> None:
    """At base 0.50, 0.80, 0.95 and 0.99 a healthy candidate reaches stable (shipped alpha)."""
    assert Thresholds().alpha == 0.0025
    back = 0
    for base in (0.50, 0.80, 0.95, 0.99):
        # On the gatekeeper's 30 s schedule: reads after every run are held to it below.
        world = World(base=base, policy=policy_for(base, hold=False), every_run=False)
        outcomes = batch(world, base, 10, seed=3)
        assert all(o.stage in ("stable", "shadow", "canary", "full") for o in outcomes)
        back += sum(o.rolled_back for o in outcomes)
    assert back <= 1  # 40 rollouts; the budget is at most 1% each


def test_a_candidate_at_half_its_runs_is_rolled_back_in_shadow_within_a_few_dozen_runs() -> None:
    """From a 0.95 current with the shipped hold, pass rate 0.5 is caught in shadow (no user
    served) on the paired flips alone, read after every run: median 26 runs of 20 at this
    seed, the slowest 46 (30 and 40 before issue 23, with a p0 from history)."""
    world = World(base=0.95, policy=policy_for(0.95, hold=True))
    outcomes = batch(world, 0.5, 20, seed=5)
    assert all(o.rolled_back and o.stage == "shadow" and o.served == 0 for o in outcomes)
    assert runs_to_rollback(outcomes) <= 30 and max(o.runs for o in outcomes) <= 60


@pytest.mark.slow
def test_large_drops_are_caught_near_the_information_bound() -> None:
    """A 0.20 drop from 0.95 and from 0.99: caught in shadow, median runs within 1.5x of
    the bound of the test run there (shadow's paired flips, `paired_bound`).

    (Against the one-sample bound of a known p0, which no test without one can reach,
    `python -m bench.rollout_scenarios` prints both.)
    """
    for base in (0.95, 0.99):
        q = round(base - 0.20, 2)
        world = World(base=base, policy=policy_for(base, hold=True))
        outcomes = batch(world, q, 25, seed=7)
        median = runs_to_rollback(outcomes)
        assert all(o.stage == "shadow" for o in outcomes)
        assert median <= 1.5 * paired_bound(base, q), (base, median)


def test_the_seed_plain_policy_rolls_back_healthy_candidates() -> None:
    """The plain last-5-runs check, same traffic: it rolls back a healthy 0.95 candidate."""
    world = World(base=0.95, policy=policy_for(0.95, hold=False))
    outcomes = batch(world, 0.95, 10, seed=3, rule=plain_rule(5))
    assert sum(o.rolled_back for o in outcomes) >= 8


# The two halves of one comparison, as two tests so that parallel workers run them at once.
@pytest.mark.slow
def test_a_small_drop_is_caught_in_shadow_by_the_power_hold() -> None:
    """0.75 against 0.80, judged against concurrent current: shadow holds until its flips
    could have caught a drop of 0.05 (`gate.power`), so nearly every such candidate is
    rolled back there, before a user sees it (with the hold off most reach users first:
    the test below)."""
    world = World(base=0.80, policy=policy_for(0.80, hold=True))
    held = batch(world, 0.75, 21, seed=9)
    assert sum(o.rolled_back and o.stage == "shadow" for o in held) >= 18, held


@pytest.mark.slow
def test_without_the_power_hold_most_small_drops_reach_users() -> None:
    """The same 21 rollouts with `gate.power` off: shadow ends on time, and most of the
    candidates are not rolled back there, before a user sees them (the test above)."""
    world = World(base=0.80, policy=policy_for(0.80, hold=True))
    off = policy_for(0.80, hold=True).model_copy(update={"power": None})
    timed = batch(dataclasses.replace(world, policy=off), 0.75, 21, seed=9)
    assert sum(o.rolled_back and o.stage == "shadow" for o in timed) <= 10, timed


def test_the_report_rate_table_stays_in_budget_and_catches_missing_reports(
        capsys: pytest.CaptureFixture[str]) -> None:
    """bench.report_sim, through decide(): no healthy rollout rolled back in 10 when every run
    reports; a candidate missing 30% of its runs caught in every one of 6."""
    # The two rows asserted on (the others cost 17 CPU-s and are asserted nowhere here).
    report_sim.main(["--rollouts", "10", "--regressed", "6", "--seed", "3", "--jobs", "1",
                     "--healthy-rates", "1.0", "--regressed-rates", "0.7"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("1.00") and "0/10" in line for line in lines), lines
    caught = next(line for line in lines if line.startswith("1.00") and "30%" in line)
    assert caught.split()[2] == "100%", caught


#: Short stages and 3 s buckets, so a literal read after every run stays cheap; the power
#: hold asks for a large drop (0.15), so it holds shadow for a while, not for hours; the
#: drift detector's h is fixed (deriving it per p0 costs ~20 ms per new p0) but in one.
_QUICK = Thresholds(min_stage_seconds=45.0, bake_seconds=60.0, min_samples=15,
                    min_pass_rate=0.8)
_POWER = PowerPolicy(drop=0.15)
_FIXED_H = DriftPolicy(h=8.0)


def _quick(power: PowerPolicy | None = _POWER, drift: DriftPolicy = _FIXED_H,
           **changes: object) -> GatePolicy:
    return GatePolicy(thresholds=_QUICK.model_copy(update=changes), power=power, drift=drift)


def _world(base: float, policy: GatePolicy | None = None, **extra: object) -> World:
    """A short history (300 runs), so the drift detector's p0 restarts within the rollout."""
    return World(base=base, policy=policy or _quick(), history=300,
                 **extra)  # type: ignore[arg-type]


_SCENARIOS = {
    "healthy": (_world(0.9), 0.9),
    "drop": (_world(0.9), 0.7),
    "small drop": (_world(0.9), 0.82),
    "shared outage": (_world(0.9, shock=Shock("canary", 10.0, 20.0, outage=True)), 0.9),
    # (No power hold: with half the jobs in the rule's stratum it would hold canary long.)
    "targeting rule": (_world(0.9, _quick(power=None), rule_tenant=0,
                              tenants=(Tenant(0.5, 0.97, 0.9), Tenant(0.5, 0.8, 0.75))), 0.9),
    "tool errors": (_world(0.9, tool_error=0.3), 0.9),
    "reports missing": (_world(0.9, _quick(min_stage_seconds=400.0), reports=(1.0, 0.6)),
                        0.9),
    # Missing runs counted as failed (the default policy) in the comparison of later stages.
    "missing runs as failures": (_world(0.9, _quick(min_stage_seconds=100.0),
                                        reports=(0.97, 0.97)), 0.85),
    "reports short in both arms": (_world(0.9, reports=(0.9, 0.9), horizon_s=240.0), 0.9),
    "criterion lost": (_world(0.9, criteria=((0.95, 0.95), (1.0, 0.6), (1.0, 1.0))), 0.9),
    "deadline rollback": (_world(0.85, _quick(min_pass_rate=0.85, stage_deadline_seconds=30.0,
                                              deadline_action="rollback")), 0.85),
    "deadline hold": (_world(0.85, _quick(min_pass_rate=0.85, stage_deadline_seconds=30.0)),
                      0.85),
    "on a schedule": (_world(0.9, every_run=False, interval=7.0), 0.8),
    # h derived per p0: the detector restarts whenever the rounded p0 moves.
    "derived drift h": (_world(0.9, _quick(drift=DriftPolicy())), 0.9),
    "no power hold": (_world(0.9, _quick(power=None)), 0.85),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SCENARIOS))
def test_event_driven_reads_decide_as_reading_after_every_run(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-driven reader (decide() only when its key changed, the concurrent section
    folded as buckets close) ends every rollout as the literal one, which builds the
    whole view afresh and calls decide() after every run (or on the schedule)."""
    monkeypatch.setattr(concurrent, "BUCKET_S", 3)
    monkeypatch.setattr(concurrent, "GRACE_S", 3)
    world, p = _SCENARIOS[name]
    count = 2 if name == "derived drift h" else 4
    fast = [rollout(world, p, random.Random(f"eq:{name}:{i}")) for i in range(count)]
    literal = [rollout(world, p, random.Random(f"eq:{name}:{i}"), literal=True)
               for i in range(count)]
    assert fast == literal


@pytest.mark.slow
def test_the_scenario_table_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m bench.rollout_sim --scenarios`, one rollout a row: every scenario of
    issues 23 and 24 has its row, and the drops sit beside their bounds."""
    from bench import rollout_scenarios
    from bench.rollout_sim import main

    # --quick changes nothing at one rollout a row but the unit test's table that follows,
    # whose rows then run 450 s instead of 900 (7 CPU-s less); that table is
    # tests/test_units_sim.py's, and here only its place after the drops is checked.
    main(["--scenarios", "--rollouts", "1", "--regressed", "1", "--jobs", "1", "--quick"])
    out = capsys.readouterr().out
    for name, _, _ in rollout_scenarios.healthy_scenarios():
        assert f"\n{name} " in out, name
    assert "worse by 0.05 in every tenant, a rule sends it the easy one" in out
    # The drop rows of the cell-based tables (the unit test's table follows them).
    cells = out.split("\nthe unit test (issues 34, 35)")[0]
    drops = [line.split() for line in cells.splitlines()
             if line[:2] == "0." and len(line.split()) > 10]
    assert "\nthe unit test (issues 34, 35)" in out
    assert [(float(d[0]), float(d[1])) for d in drops] == \
        [*rollout_scenarios.DROPS, (0.9999, 0.999)]
    assert "with power.min_rise 0.0009" in out
    for name, _, _ in rollout_scenarios.issue24_healthy() + rollout_scenarios.issue24_regressed():
        assert f"  {name} " in out, name
