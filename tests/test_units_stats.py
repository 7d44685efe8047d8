"""The unit test's statistics, its facts and its rules, without I/O.

Simulated rollouts feed `unit_test` the first events the ingest script would
have stored: keys that are customers (Zipf volumes, difficulty on the logit
scale), retries under one key, a shared outage by start time, report lags.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections import defaultdict
from dataclasses import dataclass

import pytest

from bindings.models import Binding, VersionedBinding
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.stats.units import (
    ArmUnits,
    Stretch,
    lag_bucket,
    lag_quantile,
    report_horizon,
    share_at,
    unit_test,
    weights_for,
)
from gatekeeper.store.unit_events import parse_epoch_units, unit_facts
from gatekeeper.view_model import UnitsView, UnitTestView
from rolegate.trace import Trace

ALPHA = 0.0025
STAMPS = {"agent_version": "a", "instruction_hash": "i", "model_id": "m",
          "tool_schema_hash": "t"}


@dataclass
class Rollout:
    """One simulated rollout: each arm's first events per second and its runs."""

    events: dict[str, dict[int, int]]
    runs: dict[str, int]
    units: dict[str, set[int]]
    repeated: dict[str, int]

    def arm(self, name: str) -> ArmUnits:
        failures = self.events[name]
        return ArmUnits(events={"run_failure": dict(failures)},
                        event_runs={"run_failure": sum(failures.values()) + self.repeated[name]},
                        runs=self.runs[name], units=len(self.units[name]), lags={4: 50})


def simulate(seed: int, *, seconds: int = 300, rate: float = 5.0, share: float = 0.5,
             current: float = 0.05, candidate: float = 0.05, customers: int | None = None,
             difficulty_sd: float = 0.0, retries: int = 0,
             outage: tuple[int, int] | None = None) -> Rollout:
    """A rollout's first failure events per unit, as the ingest script files them."""
    rnd = random.Random(seed)
    weights = [1.0 / (k + 1) ** 1.1 for k in range(customers or 0)]
    # Accumulated once, as rnd.choices(population, weights) does on every call: the same
    # draws (its bisect on random() * total), without an O(customers) sum per run.
    cumulative = list(itertools.accumulate(weights))
    total, last = (cumulative[-1] + 0.0, len(cumulative) - 1) if cumulative else (0.0, 0)
    difficulty = [rnd.gauss(0.0, difficulty_sd) for _ in weights]
    arms = {u: rnd.random() < share for u in range(customers or 0)}

    def chance(failing: float, hard: float) -> float:
        """A run's failure chance: the arm's rate moved by the unit's difficulty (logits)."""
        return 1 / (1 + math.exp(-(math.log(failing / (1 - failing)) + hard)))

    # Each customer's (or a fresh key's, per arm) chance, computed once, not per run.
    chances = [chance(candidate if arms[u] else current, hard) for u, hard in enumerate(difficulty)]
    fresh_chance = {True: chance(candidate, 0.0), False: chance(current, 0.0)}
    events: dict[str, dict[int, int]] = {"candidate": defaultdict(int),
                                         "current": defaultdict(int)}
    runs = {"candidate": 0, "current": 0}
    units: dict[str, set[int]] = {"candidate": set(), "current": set()}
    repeated = {"candidate": 0, "current": 0}
    seen: set[int] = set()
    t, fresh = 0.0, 10 ** 6
    while t < seconds:
        t += rnd.expovariate(rate)
        if customers:
            unit = bisect.bisect(cumulative, rnd.random() * total, 0, last)
            fails, on_candidate = chances[unit], arms[unit]
        else:
            fresh += 1
            on_candidate = rnd.random() < share
            unit, fails = fresh, fresh_chance[on_candidate]
        arm = "candidate" if on_candidate else "current"
        for attempt in range(retries + 1):
            start = t + attempt * 2.0
            runs[arm] += 1
            units[arm].add(unit)
            failed = rnd.random() < fails or (
                outage is not None and outage[0] <= start < outage[1])
            if not failed:
                break
            if unit in seen:
                repeated[arm] += 1
            else:
                seen.add(unit)
                events[arm][int(start)] += 1
    return Rollout(events, runs, units, repeated)


def rejected(rollout: Rollout, share: float = 0.5, now: float = 10 ** 6) -> bool:
    verdict = unit_test(rollout.arm("candidate"), rollout.arm("current"),
                        [Stretch(0.0, share)], now, ALPHA)
    return verdict.reject


@pytest.mark.parametrize("world", [
    {"customers": 40, "difficulty_sd": 1.0},
    {"customers": 300, "difficulty_sd": 0.7, "rate": 10.0},
    {"retries": 3, "current": 0.15, "candidate": 0.15},
    {"outage": (60, 105)},
    {"customers": 100, "difficulty_sd": 1.0, "retries": 2, "outage": (30, 75), "share": 0.1},
], ids=["40-customers", "300-customers", "retries", "outage", "all-at-10pct"])
def test_a_healthy_candidate_is_almost_never_rejected(world: dict[str, object]) -> None:
    """300 healthy rollouts per world, the whole rollout read at once: at most 1% rejected."""
    share = float(world.get("share", 0.5))  # type: ignore[arg-type]
    false = sum(rejected(simulate(seed, **world), share) for seed in range(300))  # type: ignore[arg-type]
    assert false <= 3, false


def test_a_candidate_failing_every_run_is_rejected_well_within_thirty_of_its_runs() -> None:
    """At 50/50 a failing unit is the candidate's with chance ~1 instead of 1/2: 30 of its runs suffice, the bound issue 35 sets."""
    for seed in range(50):
        rollout = simulate(seed, seconds=30, candidate=0.999)
        seconds = sorted(rollout.events["candidate"])
        needed = next(s for s in seconds if rejected(_until(rollout, s + 1)))
        failures = sum(c for s, c in rollout.events["candidate"].items() if s <= needed)
        assert failures <= 30, (seed, failures)


def test_a_worse_candidate_is_still_caught_after_a_shared_outage() -> None:
    """Unique keys, an outage from 10 s to 55 s on both arms, then 0.5 against 0.95."""
    caught = sum(rejected(simulate(seed, seconds=200, candidate=0.5, outage=(10, 55)))
                 for seed in range(50))
    assert caught >= 48, caught


def test_events_past_the_report_horizon_wait() -> None:
    """Current reports 60 s late: its recent seconds are not read against the candidate's."""
    late = {lag_bucket(60.0): 100}
    horizon = report_horizon({"candidate": {lag_bucket(1.0): 100}, "current": late}, 1000.0)
    assert horizon is not None and 935.0 <= horizon <= 940.0
    # Every recent failure on the candidate, current's not arrived yet: no verdict from them.
    candidate = ArmUnits(events={"run_failure": {990: 30}}, lags={lag_bucket(1.0): 100})
    current = ArmUnits(events={}, lags=late)
    assert not unit_test(candidate, current, [Stretch(0.0, 0.5)], 1000.0, ALPHA).reject
    assert unit_test(candidate, current, [Stretch(0.0, 0.5)], 1100.0, ALPHA).reject
    assert report_horizon({"candidate": {1: 4}}, 10.0) is None
    assert lag_quantile({0: 99, 40: 1}) == lag_quantile({0: 99, 40: 1}, 0.99)


def test_repeated_keys_and_retries_are_recognised() -> None:
    customers = simulate(1, customers=40, difficulty_sd=1.0)
    unique = simulate(1)
    retried = simulate(1, retries=3, current=0.2, candidate=0.2)
    check = unit_test
    assert check(customers.arm("candidate"), customers.arm("current"), [Stretch(0, .5)],
                 1e6, ALPHA).repeats
    assert not check(unique.arm("candidate"), unique.arm("current"), [Stretch(0, .5)],
                     1e6, ALPHA).repeats
    assert check(retried.arm("candidate"), retried.arm("current"), [Stretch(0, .5)],
                 1e6, ALPHA).repeats


def test_each_second_reads_the_share_then_and_weights_are_fixed_by_the_spec() -> None:
    stretches = [Stretch(100.0, 0.1), Stretch(200.0, 0.5)]
    assert share_at(stretches, 50.0) is None
    assert share_at(stretches, 150.0) == 0.1
    assert share_at(stretches, 250.0) == 0.5
    assert sum(weights_for(["a", "b"]).values()) == pytest.approx(1.0)
    assert sum(weights_for([]).values()) == pytest.approx(1.0)
    assert weights_for(["a", "b"])["crit:a"] == pytest.approx(0.1)


def _until(rollout: Rollout, second: int) -> Rollout:
    cut = {arm: {s: c for s, c in events.items() if s < second}
           for arm, events in rollout.events.items()}
    return Rollout(cut, rollout.runs, rollout.units, {"candidate": 0, "current": 0})


def _trace(**fields: object) -> Trace:
    base: dict[str, object] = {"run_id": "r1", "role": "r", "config": "cfg-b",
                               "arm": "candidate", "key": "customer-1", "stamps": STAMPS,
                               "time": 1000.0, "latency_s": 12.0}
    return Trace.model_validate({**base, **fields})


def test_unit_facts_take_only_randomised_runs_of_the_live_arms() -> None:
    binding = Binding(current="cfg-a", candidate="cfg-b", stage="canary", share=0.5,
                      stage_since=900.0)
    failed = TraceVerdict(passed=False)
    facts = unit_facts(binding, _trace(), failed, now=1001.0)
    assert facts is not None and facts.metrics == ("run_failure",)
    assert facts.start_second == 988
    # The candidate's latency is read against the limit raised by the policy's +20%.
    assert facts.latency_ms == 10000
    same = unit_facts(binding, _trace(run_id="r2"), failed, now=1001.0)
    assert same is not None and same.unit == facts.unit  # one customer, one unit
    assert unit_facts(binding, _trace(rule="tenant"), failed, 1001.0) is None
    assert unit_facts(binding, _trace(config="cfg-a"), failed, 1001.0) is None
    shadow = binding.model_copy(update={"stage": "shadow", "share": 0.0})
    assert unit_facts(shadow, _trace(), failed, 1001.0) is None
    by_tenant = binding.model_copy(update={"bucket_by": "tenant"})
    assert unit_facts(by_tenant, _trace(), failed, 1001.0) is None  # no tenant: not randomised
    tenant = unit_facts(by_tenant, _trace(attributes={"tenant": "acme"}), failed, 1001.0)
    assert tenant is not None and tenant.unit != facts.unit
    raw = {b"runs": b"3", b"lag|4": b"3", b"r|run_failure": b"2", b"e|run_failure|988": b"1"}
    parsed = parse_epoch_units(raw, units=2)
    assert parsed.events == {"run_failure": {988: 1}} and parsed.runs == 3


def _units(reject: bool, repeats: bool, repeats_why: str = "",
           reason: str | None = None) -> UnitsView:
    """The `units` section as decide() reads it: only the test's verdict filled in."""
    test = UnitTestView.model_construct(reject=reject, repeats=repeats, repeats_why=repeats_why)
    return UnitsView.model_construct(test=test, reason=reason)


def _decide(units: UnitsView, **evidence: object) -> tuple[Action, str]:
    binding = Binding(current="cfg-a", candidate="cfg-b", stage="canary", share=0.5,
                      stage_since=0.0)
    record = VersionedBinding(role="r", version=3, binding=binding, updated_at=0.0,
                              updated_by="test")
    decision = decide("r", record, Evidence(verdict="pass", n=100, passes=95, units=units,
                                            **evidence), now=10.0)  # type: ignore[arg-type]
    return decision.action, decision.reason


def test_the_unit_test_rolls_back_and_repeated_keys_make_run_level_tests_hold() -> None:
    action, reason = _decide(_units(True, False, reason="unit test e^7.00 >= e^5.99"))
    assert action is Action.ROLLBACK and reason.startswith("unit test")
    # A CUSUM alarm on the candidate (a run-level test) only holds when keys repeat.
    action, reason = _decide(_units(False, True, "40 distinct keys carry 900 runs"),
                             candidate_alarms=("run_failure",))
    assert action is Action.HOLD and "keys carry several runs" in reason, reason
    action, _ = _decide(_units(False, False), candidate_alarms=("run_failure",))
    assert action is Action.ROLLBACK


def test_the_difference_interval_covers_the_truth_at_every_look() -> None:
    """200 A/B streams (0.90 vs 0.95), read every 25 runs up to 2,000: the interval on the
    difference misses the truth at any look in at most 5% of streams."""
    from gatekeeper.stats.difference import mean_difference, rate_moments

    missed = 0
    for seed in range(200):
        rnd = random.Random(seed)
        passes = [0, 0]
        for n in range(1, 2001):
            passes[0] += rnd.random() < 0.90
            passes[1] += rnd.random() < 0.95
            if n % 25:
                continue
            found = mean_difference("pass_rate", rate_moments(n, passes[0]),
                                    rate_moments(n, passes[1]))
            assert found.lower is not None and found.upper is not None
            if not found.lower <= -0.05 <= found.upper:
                missed += 1
                break
    assert missed <= 10, missed


def test_a_lost_criterion_with_repeating_keys_is_a_unit_event() -> None:
    """The unit test's crit: events come from the config's spec, decided at ingest."""
    from gatekeeper.checks.criteria import evaluate, generate
    from gatekeeper.checks.spec import Spec

    spec = Spec.model_validate({"system": "s", "escalation": [
        {"id": "high-value", "condition": "over 1000", "when": [
            {"field": "amount", "op": "gt", "value": 1000}], "tool": "verifyIdentity"}]})
    criteria = [c for c in generate(spec) if c.deterministic]
    binding = Binding(current="cfg-a", candidate="cfg-b", stage="canary", share=0.5,
                      stage_since=900.0)
    trace = _trace(tools=["lookupOrder"], input={"amount": 4000})
    failed = tuple(k for k, v in evaluate(criteria, trace).items() if v is False)
    facts = unit_facts(binding, trace, TraceVerdict(passed=True), 1001.0, failed)
    assert facts is not None and facts.metrics == ("crit:escalation:high-value",)


def test_no_reading_until_every_arm_has_reported_enough_to_know_its_lag() -> None:
    """Current's reports come 150 s late and only 4 are in: the candidate's failures of the
    last seconds are not read against a current that has not reported them yet."""
    candidate = ArmUnits(events={"run_failure": {s: 1 for s in range(10, 26)}},
                         lags={lag_bucket(1.0): 300})
    current = ArmUnits(events={}, lags={lag_bucket(150.0): 4})
    early = unit_test(candidate, current, [Stretch(0.0, 0.5)], 30.0, ALPHA)
    assert early.horizon is None and not early.reject
    enough = ArmUnits(events={}, lags={lag_bucket(150.0): 5})
    later = unit_test(candidate, enough, [Stretch(0.0, 0.5)], 30.0, ALPHA)
    assert later.horizon is not None and not later.reject  # 150 s: nothing is read yet
