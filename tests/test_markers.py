"""The `walkthrough` marker only lets a developer leave tests out: CI's command runs them.

.ci/run runs the README Quickstart's second sh block; neither it nor pytest's addopts
may deselect by marker, or the packaging and docs walk-throughs would silently stop
running in CI.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from tests.conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parent.parent


def readme_test_command() -> str:
    """The command .ci/run runs: the first line of the Quickstart's second sh block."""
    quickstart = ROOT.joinpath("README.md").read_text().split("## Quickstart", 1)[1]
    quickstart = re.split(r"\n## ", quickstart, maxsplit=1)[0]
    return re.findall(r"```sh\n(.*)\n", quickstart)[1]


def test_the_ci_command_and_addopts_deselect_no_marker() -> None:
    """No -m (or -k) in the README's test command or in pytest's addopts."""
    command = shlex.split(readme_test_command())
    at = max(i for i, word in enumerate(command) if word.endswith("pytest"))
    assert not {"-m", "-k"} & set(command[at:]), command  # pytest's own arguments
    addopts = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())[
        "tool"]["pytest"]["ini_options"]["addopts"].split()
    assert not {"-m", "-k"} & set(addopts), addopts


#: The packaging and walk-through tests: each carries the marker.
MARKED = ("test_fresh_install.py", "test_docs_walkthrough.py", "test_docs_shell_walkthrough.py",
          "test_docs_criteria.py", "test_docs_integrations.py", "test_example_story.py",
          "test_example_roles.py", "test_readme_judges.py", "test_readme_rollout.py")


def test_the_packaging_and_walkthrough_tests_carry_the_marker() -> None:
    """Each of them is marked (so `-m 'not walkthrough'` leaves it out), and the marker is
    declared (pytest runs with --strict-markers)."""
    unmarked = [name for name in MARKED
                if "pytest.mark.walkthrough" not in ROOT.joinpath("tests", name).read_text()]
    assert unmarked == []
    markers = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())[
        "tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("walkthrough:") for m in markers)


def test_each_longest_first_entry_names_a_test_that_exists() -> None:
    """conftest.LONGEST_FIRST, the tests started first under -n: each entry still names a test
    (a renamed one would quietly go back to starting late)."""
    missing = []
    for prefix in LONGEST_FIRST:
        path, _, name = prefix.partition("::")
        source = ROOT.joinpath(path).read_text() if ROOT.joinpath(path).is_file() else ""
        if not source or f"def {name.partition('[')[0]}" not in source:
            missing.append(prefix)
    assert missing == []
