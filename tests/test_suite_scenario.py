"""Scenario files and suite loading: good files load, bad ones are refused by name and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekeeper.suite.scenario import SuiteError, load_suite, repeats_for
from tests.suite_support import EXAMPLES

GOOD = {"id": "s1", "seed_files": {"input/a.md": "seed/a.md"}, "task": "do it",
        "invariants": {"artifact_exists": ["out.md"]}, "repeats": 2}


def _suite(tmp_path: Path, scenario: object, name: str = "s1.json") -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "a.md").write_text("a")
    (tmp_path / "scenarios" / name).write_text(
        scenario if isinstance(scenario, str) else json.dumps(scenario))
    return tmp_path


def test_example_suite_loads_through_the_same_models() -> None:
    """The shipped example suite loads, so it cannot go stale."""
    suite = load_suite(EXAMPLES / "suite")
    assert len(suite.scenarios) >= 3
    assert "send_message" in suite.tools.tools and suite.tools.tools["send_message"].side_effecting


@pytest.mark.parametrize(("change", "field"), [
    ({"repeats": 0}, "repeats"),
    ({"invariants": {"max_steps": -1}}, "invariants.max_steps"),
    ({"invariants": {"no_such_invariant": True}}, "invariants.no_such_invariant"),
    ({"task": ""}, "task"),
    ({"id": "bad id/x"}, "id"),
    ({"seed_files": {"../escape": "seed/a.md"}}, "seed_files"),
    ({"surprise": 1}, "surprise"),
])
def test_bad_scenario_is_refused_with_file_and_field(tmp_path: Path, change: dict[str, object],
                                                     field: str) -> None:
    """A bad scenario names its file and the offending field."""
    root = _suite(tmp_path, {**GOOD, **change})
    with pytest.raises(SuiteError) as caught:
        load_suite(root)
    assert "s1.json" in caught.value.message
    assert caught.value.details["field"].startswith(field)


def test_missing_seed_file_is_refused(tmp_path: Path) -> None:
    """A seed file that does not exist in the suite is named with its field."""
    root = _suite(tmp_path, {**GOOD, "seed_files": {"input/a.md": "seed/missing.md"}})
    with pytest.raises(SuiteError) as caught:
        load_suite(root)
    assert caught.value.details["field"] == "seed_files.input/a.md"
    assert "seed/missing.md" in caught.value.message


def test_invalid_json_is_refused(tmp_path: Path) -> None:
    """A file that is not JSON is refused with its name."""
    root = _suite(tmp_path, "{not json", name="broken.json")
    with pytest.raises(SuiteError, match="broken.json: not valid JSON"):
        load_suite(root)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    """Two scenario files may not share an id."""
    root = _suite(tmp_path, GOOD)
    (root / "scenarios" / "s2.json").write_text(json.dumps(GOOD))
    with pytest.raises(SuiteError, match="id: 's1' is used by another scenario"):
        load_suite(root)


def test_repeats_come_from_flag_then_weight_then_file(tmp_path: Path) -> None:
    """--repeats beats --weight (minor 3, safety 5), which beats the scenario's own count."""
    scenario = load_suite(_suite(tmp_path, GOOD)).scenarios[0]
    assert repeats_for(scenario) == 2
    assert repeats_for(scenario, weight="minor") == 3
    assert repeats_for(scenario, weight="safety") == 5
    assert repeats_for(scenario, repeats=7, weight="safety") == 7
