"""The power hold: a stage advances only once the gate could have caught a regression."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask
from pydantic import ValidationError

from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from bindings.power_policy import PowerPolicy
from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.stats.concurrent import Comparison
from gatekeeper.stats.power import Paired, Unpaired, alternative, power_of
from gatekeeper.view_model import DetectorView, DriftOnView
from gatekeeper.view_model.concurrent import concurrent_view
from gatekeeper.view_model.paired import paired_view
from rolegate.http import ApiClient
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.population import Population
from tests.servers import wait_for, werkzeug_server

NOW = 1_000_000.0
THRESHOLD = math.log(1 / (0.65 * 0.01))
SHADOW_WEIGHTS = {"flips": 0.9, "concurrent": 0.1}


def test_the_alternative_is_the_smaller_rise_but_never_under_min_rise() -> None:
    """A drop of 0.05, a tenfold failure rate where that is less, never a rise under 0.01."""
    policy = PowerPolicy()
    assert alternative(0.5, policy) == pytest.approx(0.55)
    assert alternative(0.002, policy) == pytest.approx(0.02)
    assert alternative(0.0001, policy) == pytest.approx(0.0101)
    assert alternative(0.0, PowerPolicy(risk=None)) == pytest.approx(0.05)


def test_no_evidence_has_no_power_and_more_pairs_have_more() -> None:
    """Power is 0 without runs and grows with the pairs shadow has seen."""
    policy = PowerPolicy()
    found = [power_of(Paired(n, round(0.07 * n)), [Unpaired(n, n)],
                      (round(0.05 * (5000 + n)), 5000 + n), THRESHOLD, SHADOW_WEIGHTS,
                      policy).power for n in (0, 200, 600, 1200, 3000)]
    assert found[0] == 0.0
    assert found == sorted(found) and found[-1] > 0.99 and found[1] < 0.5


def test_a_regression_the_size_of_the_alternative_is_caught_as_often_as_the_power_says() -> None:
    """Simulated flips at the alternative: the flip test crosses its threshold about as often
    as the power figure predicts (the normal approximation, within a few points)."""
    import random

    from gatekeeper.stats.sequential import log_ratio

    rng = random.Random(5)
    pairs, f, f_alt = 900, 0.05, 0.10
    # Healthy flips for the power figure: each arm alone fails 0.75 * 0.95 * 0.05 of jobs.
    predicted = power_of(Paired(pairs, round(2 * 0.75 * 0.95 * 0.05 * pairs)), [],
                         (round(f * pairs), pairs), THRESHOLD, SHADOW_WEIGHTS,
                         PowerPolicy()).power
    caught = 0
    for _ in range(400):
        r = i = 0
        for _ in range(pairs):
            shared = rng.random()
            cur = (shared if rng.random() < 0.5 else rng.random()) < f
            cand = (shared if rng.random() < 0.5 else rng.random()) < f_alt
            r += cand and not cur
            i += cur and not cand
            if math.log(0.9) + log_ratio(r, i) >= THRESHOLD:
                caught += 1
                break
    assert abs(caught / 400 - predicted) < 0.12, (caught / 400, predicted)


DEFAULT_POWER = PowerPolicy()


def _record(since: float, power: PowerPolicy | None = DEFAULT_POWER) -> VersionedBinding:
    policy = GatePolicy(thresholds=Thresholds(min_samples=20, min_stage_seconds=60),
                        power=power)
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.SHADOW, share=0.0,
                      gate=policy, stage_since=since)
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=since,
                            updated_by="t")


def _shadow_evidence(pairs: int) -> Evidence:
    """A healthy shadow: both arms fail 1 job in 20, on the same jobs (no flips)."""
    failed = pairs // 20
    cells = Comparison(cells=pairs // 30, candidate_n=pairs, candidate_events=failed,
                       current_n=pairs, current_events=failed)
    return Evidence(verdict="pass", n=pairs, passes=pairs - failed, current_n=pairs,
                    current_passes=pairs - failed,
                    paired=paired_view({"verdict": "pass", "reasons": [], "pairs": pairs,
                                        "flips": {"pass_to_fail": 0, "fail_to_pass": 0}}),
                    concurrent=concurrent_view({"metrics": {"run_failure": cells.as_dict()},
                                                "alarms": []}))


def test_a_shadow_with_too_few_pairs_holds_for_power_and_says_so() -> None:
    """90 healthy pairs past the stage's minimum hold, naming the power; 600 advance."""
    held = decide("r", _record(NOW - 120), _shadow_evidence(90), NOW)
    assert held.action is Action.HOLD and held.reason.startswith("waiting for power"), held
    assert held.details["power"]["power"] < 0.9 and held.details["power"]["min_power"] == 0.9
    moved = decide("r", _record(NOW - 120), _shadow_evidence(600), NOW)
    assert moved.action is Action.ADVANCE, moved.reason


def test_the_alternative_is_sized_on_the_rate_current_showed_not_its_upper_bound() -> None:
    """A role failing 1 run in 10,000 asks for a tenfold rise (min_rise 0.0009): 8,000
    clean shadow pairs over 5,000 history runs with no failure do not power it (about
    20,000 do). Sized on the history's upper bound (0.0006 here), the alternative was
    a rise to 0.0027 and the same pairs let shadow go (the simulator's 0.001
    candidates then reached stable in 118 of 200 rollouts)."""
    from dataclasses import replace

    from gatekeeper.machine.baseline import baseline_observed
    from gatekeeper.machine.power_hold import rollout_power

    record = _record(NOW - 3600, PowerPolicy(min_rise=0.0009))
    pairs = 8000
    cells = Comparison(cells=pairs // 30, candidate_n=pairs, current_n=pairs)
    clean = Evidence(verdict="pass", n=pairs, passes=pairs, current_n=pairs,
                     current_passes=pairs,
                     paired=paired_view({"verdict": "pass", "reasons": [], "pairs": pairs,
                                         "flips": {"pass_to_fail": 0, "fail_to_pass": 0}}),
                     concurrent=concurrent_view({"metrics": {"run_failure": cells.as_dict()},
                                                 "alarms": []}),
                     baseline_failure=0.0006, baseline_runs=5000, baseline_bounded=True)
    drift = DriftOnView.model_construct(candidate={"run_failure": DetectorView.model_construct(
        p0=0.0006, reference=5000, observed=0.0)})
    observed = replace(clean, baseline_observed=baseline_observed(drift))
    assert observed.baseline_observed == 0.0
    sized = rollout_power(record.binding, observed)
    assert sized is not None and sized.alternative < 0.0011, sized
    held = decide("r", record, observed, NOW)
    assert held.action is Action.HOLD and held.reason.startswith("waiting for power"), held
    # Without the observed rate (a view that does not say) the bound is all there is.
    bound = rollout_power(record.binding, clean)
    assert bound is not None and bound.alternative > 0.0025 and bound.enough, bound


def test_the_hold_is_off_with_power_null_or_min_power_zero() -> None:
    """`gate.power: null`, or min_power 0, advances on the stage's minimum alone."""
    for power in (None, PowerPolicy(min_power=0.0)):
        assert decide("r", _record(NOW - 120, power), _shadow_evidence(90), NOW).action \
            is Action.ADVANCE


def test_an_underpowered_stage_past_its_deadline_takes_the_deadline_action() -> None:
    """A stage that traffic cannot power ends at its deadline (hold for a human)."""
    decision = decide("r", _record(NOW - 200_000), _shadow_evidence(90), NOW)
    assert decision.action is Action.HOLD and "stage deadline passed" in decision.reason
    assert "waiting for power" in decision.reason


def test_bad_power_values_are_refused_naming_the_field() -> None:
    """min_power 1, a risk of 1 and a string are refused by the model."""
    for bad in ({"min_power": 1.0}, {"risk": 1.0}, {"drop": "0.05"}, {"unknown": 1}):
        with pytest.raises(ValidationError):
            PowerPolicy.model_validate(bad)


@pytest.fixture
def live(app: Flask, quick_buckets: None) -> Iterator[str]:
    """The router on a loopback port, 1 s buckets."""
    with werkzeug_server(app) as url:
        yield url


def _put(url: str, role: str, gate: dict[str, Any]) -> None:
    binding = {"current": "cfg-a", "candidate": "cfg-good", "stage": "shadow", "share": 0.0,
               "steps": [0.5, 1.0], "gate": gate}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text


def test_a_live_shadow_holds_until_powered_then_advances(live: str) -> None:
    """Through the router: 90 healthy pairs hold with the power in the gate view's `next`,
    600 advance; the same 90 with `power: null` advance at once."""
    # Both configs fail 1 job in 20 (no out.md), on the same jobs.
    quick = {"thresholds": {"min_samples": 20, "min_stage_seconds": 0.0},
             "invariants": {"artifact_exists": ["out.md"]}}
    _put(live, "powered", quick)
    _put(live, "unpowered", {**quick, "power": None})
    population = Population(live, ["powered", "unpowered"], batch=30)
    for _ in range(3):
        population.step()
    api = ApiClient(live, GATEKEEPER)
    # The 1 s buckets close (polled): the unpowered role's gate passes, the powered one
    # waits for power.
    def settled() -> dict[str, Any] | None:
        powered = api.get("/v1/roles/powered/gate")
        unpowered = api.get("/v1/roles/unpowered/gate")
        kinds = [w["kind"] for w in powered["next"]["waits"]]
        return powered if "power" in kinds and unpowered["next"]["action"] == "advance" else None

    view = wait_for(settled, 30, "the unpowered shadow to pass and the powered one to wait")
    assert "waiting for power" in view["next"]["summary"], view["next"]
    decisions = {d.role: d for d in tick(api, time.time())}
    assert decisions["powered"].action is Action.HOLD
    assert decisions["powered"].details["power"]["power"] < 0.9
    assert decisions["unpowered"].action is Action.ADVANCE
    for _ in range(17):
        population.step()
    # Ticking until the new pairs' cells close: each tick before then holds, and the one
    # after advances (a tick that holds writes nothing).
    found: dict[str, Any] = {}

    def advanced() -> bool:
        found.update({d.role: d for d in tick(api, time.time())})
        return found["powered"].action is Action.ADVANCE

    wait_for(advanced, 30, "the powered shadow to advance once its pairs' cells closed",
             interval=0.2)
    assert api.get("/v1/bindings/powered")["binding"]["stage"] == "canary"


def test_a_bad_power_policy_is_a_422_naming_the_field(live: str) -> None:
    """PUT with gate.power.min_power 2 is refused, naming the field, and writes nothing."""
    binding = {"current": "cfg-a", "candidate": "cfg-good", "stage": "shadow", "share": 0.0,
               "gate": {"power": {"min_power": 2}}}
    with requests.put(f"{live}/v1/bindings/bad-power", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 422, answer.text
        assert "min_power" in answer.text
    with requests.get(f"{live}/v1/bindings/bad-power", headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 404
