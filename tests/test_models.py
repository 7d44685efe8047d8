"""The binding model refuses inconsistent bindings, naming the field; the example file loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bindings.models import Binding, BindingFile, Stage

EXAMPLE = Path(__file__).resolve().parent.parent / "bindings.example.json"


def _refused(**fields: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Binding.model_validate({"current": "cfg_a", **fields})
    return str(info.value)


def test_example_file_loads_through_the_service_models() -> None:
    """bindings.example.json is a valid BindingFile with a stable, a shadow and a canary role."""
    example = BindingFile.model_validate_json(EXAMPLE.read_bytes())
    stages = {binding.stage for binding in example.roles.values()}
    assert {Stage.STABLE, Stage.SHADOW, Stage.CANARY} <= stages
    canary = next(b for b in example.roles.values() if b.stage is Stage.CANARY)
    assert 0 < canary.share < 1 and canary.candidate


def test_example_file_shows_production_stage_timing() -> None:
    """Every example role states a minimum time per stage and a real bake in full."""
    raw = json.loads(EXAMPLE.read_text())["roles"]
    example = BindingFile.model_validate({"roles": raw})
    for role, binding in example.roles.items():
        stated = raw[role]["gate"]["thresholds"]
        assert {"min_stage_seconds", "bake_seconds"} <= set(stated), role
        thresholds = binding.gate.thresholds
        assert thresholds.min_stage_seconds >= 15 * 60, role
        assert thresholds.bake_seconds >= 2 * 3600, role
        assert thresholds.bake_seconds > thresholds.min_stage_seconds, role


def test_defaults_are_a_stable_binding() -> None:
    """A binding with only `current` is stable, share 0, with the default gate thresholds."""
    binding = Binding(current="cfg_a")
    assert binding.stage is Stage.STABLE and binding.share == 0.0 and not binding.paused
    assert binding.gate.thresholds.min_pass_rate == 0.9
    assert binding.gate.thresholds.max_forbidden_rate == 0.0


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_share_outside_unit_interval_is_refused(share: float) -> None:
    """A share outside 0..1 is refused with a message naming share."""
    assert "share" in _refused(candidate="cfg_b", stage="canary", share=share)


@pytest.mark.parametrize("stage", ["shadow", "canary", "full"])
def test_live_stage_without_candidate_is_refused(stage: str) -> None:
    """shadow, canary and full need a candidate, and the message says so."""
    share = {"shadow": 0.0, "canary": 0.5, "full": 1.0}[stage]
    assert "candidate" in _refused(stage=stage, share=share)


def test_steps_not_ascending_are_refused() -> None:
    """A canary ladder that does not strictly ascend is refused, naming steps."""
    message = _refused(steps=[0.5, 0.1, 1.0])
    assert "steps" in message and "ascending" in message


def test_unknown_stage_is_refused() -> None:
    """A stage outside the five known ones is refused, naming stage."""
    assert "stage" in _refused(stage="half")


def test_unknown_keys_are_refused_at_every_level() -> None:
    """Unknown keys are refused in the binding and inside its gate policy."""
    assert "colour" in _refused(colour="blue")
    assert "min_pass" in _refused(gate={"thresholds": {"min_pass": 0.5}})


def test_share_must_match_stage() -> None:
    """Stable routes nothing to the candidate, and full routes everything."""
    assert "share" in _refused(candidate="cfg_b", stage="stable", share=0.3)
    assert "share" in _refused(candidate="cfg_b", stage="full", share=0.5)


def test_binding_file_refuses_bad_role_names() -> None:
    """A role name that cannot be a Redis key or URL segment is refused."""
    with pytest.raises(ValidationError, match="role name"):
        BindingFile.model_validate({"roles": {"bad/name": {"current": "cfg_a"}}})


def test_with_changes_rechecks_invariants() -> None:
    """Changing a binding runs every invariant again."""
    binding = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY, share=0.1)
    assert binding.with_changes(share=0.5).share == 0.5
    with pytest.raises(ValidationError):
        binding.with_changes(share=0.0)
