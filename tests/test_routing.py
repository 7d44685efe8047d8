"""Bucketing is sticky, monotone, uniform and identical in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bindings.models import Binding, Stage
from rolegate.routing import bucket, resolve

KEYS = [f"job-{i}" for i in range(10_000)]


def _canary(share: float) -> Binding:
    return Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY, share=share)


def _arms(share: float) -> list[str]:
    binding = _canary(share)
    return [resolve("summarizer", binding, 1, key)["arm"] for key in KEYS]


def test_same_key_always_gets_the_same_arm() -> None:
    """Resolving the same 10,000 keys twice gives each key the same arm."""
    assert _arms(0.3) == _arms(0.3)


def test_raising_the_share_only_moves_keys_to_the_candidate() -> None:
    """Over 10,000 keys, each step up the ladder keeps every candidate key on the candidate."""
    previous = _arms(0.01)
    for share in (0.05, 0.1, 0.25, 0.5, 0.75, 0.99):
        arms = _arms(share)
        moved_back = [k for k, was, now in zip(KEYS, previous, arms)
                      if was == "candidate" and now == "current"]
        assert moved_back == [], f"share {share} moved keys back: {moved_back[:5]}"
        assert arms.count("candidate") >= previous.count("candidate")
        previous = arms


@pytest.mark.parametrize("share", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_observed_share_is_within_one_and_a_half_points(share: float) -> None:
    """Over 10,000 keys the candidate's observed share is within 1.5 points of the share."""
    observed = _arms(share).count("candidate") / len(KEYS)
    assert abs(observed - share) <= 0.015, observed


def test_resolution_is_finer_than_one_in_ten_thousand() -> None:
    """A 0.0001 share routes some keys and a 0.0002 share routes more than 0.0001 does."""
    buckets = sorted(bucket("summarizer", f"k{i}") for i in range(100_000))
    below = [sum(b < s for b in buckets) for s in (0.0001, 0.0002)]
    assert 0 < below[0] < below[1]


def test_buckets_are_the_same_in_another_process() -> None:
    """A process with a different hash seed computes the same buckets (no salted hash())."""
    keys = KEYS[:50]
    code = ("import json,sys; from rolegate.routing import bucket; "
            "print(json.dumps([bucket('summarizer', k) for k in json.loads(sys.argv[1])]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(keys)], env=env,
                         capture_output=True, check=True, text=True).stdout
    assert json.loads(out) == [bucket("summarizer", k) for k in keys]


def test_buckets_differ_per_role() -> None:
    """The same job key lands in independent buckets for different roles."""
    assert [bucket("a", k) for k in KEYS[:20]] != [bucket("b", k) for k in KEYS[:20]]


def test_shadow_serves_current_and_names_the_candidate() -> None:
    """In shadow the current config serves and `shadow` names the candidate."""
    binding = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.SHADOW)
    answer = resolve("summarizer", binding, 3, "job-1")
    assert (answer["config"], answer["arm"], answer["shadow"]) == ("cfg_a", "current", "cfg_b")


def test_full_and_rolled_back_route_everything_one_way() -> None:
    """Full without a holdback sends every key to the candidate; rolled_back every key to
    current."""
    full = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.FULL, share=1.0,
                   holdback=0.0)
    rolled = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.ROLLED_BACK)
    assert {resolve("r", full, 1, k)["config"] for k in KEYS[:500]} == {"cfg_b"}
    assert {resolve("r", rolled, 1, k)["config"] for k in KEYS[:500]} == {"cfg_a"}
    assert resolve("r", rolled, 1, "k")["shadow"] is None


def test_full_holds_back_a_sticky_share_on_current() -> None:
    """Full keeps the keys whose bucket is at or above 1 - holdback on current (5% by
    default, said on the answer): the same keys every canary step below it kept there."""
    full = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.FULL, share=1.0)
    assert full.holdback == 0.05
    answers = [resolve("r", full, 1, k) for k in KEYS]
    held = [a for a in answers if a["arm"] == "current"]
    assert 0.03 * len(KEYS) < len(held) < 0.07 * len(KEYS)
    assert all(a["holdback"] == 0.05 for a in answers)
    assert {a["key"] for a in held} == {k for k in KEYS if bucket("r", k) >= 0.95}
    half = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY, share=0.5)
    assert "holdback" not in resolve("r", half, 1, KEYS[0])
    assert all(resolve("r", half, 1, a["key"])["arm"] == "current" for a in held)
