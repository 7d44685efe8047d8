"""The `walkthrough` marker keeps the slow packaging and walk-through tests out of the README's
test command, and CI still runs them: .ci/run runs the Quickstart's second sh block (the test
command, `-m 'not walkthrough'`) and its third (`-m walkthrough`). Between them every test runs:
no other marker, keyword or addopts may deselect anything.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parent.parent


def quickstart_commands() -> list[str]:
    """The first line of each sh block of the README's Quickstart."""
    quickstart = ROOT.joinpath("README.md").read_text().split("## Quickstart", 1)[1]
    quickstart = re.split(r"\n## ", quickstart, maxsplit=1)[0]
    return re.findall(r"```sh\n(.*)\n", quickstart)


def readme_test_command() -> str:
    """The README's test command: the first line of the Quickstart's second sh block."""
    return quickstart_commands()[1]


def _pytest_args(command: str) -> list[str]:
    """The arguments of the last pytest `command` runs."""
    words = shlex.split(command)
    at = max(i for i, word in enumerate(words) if word.endswith("pytest"))
    return words[at + 1:]


def _selection(args: list[str]) -> list[str]:
    """The -m/-k options (with their values) among pytest's `args`."""
    return [f"{word} {args[i + 1]}" for i, word in enumerate(args) if word in ("-m", "-k")]


def test_ci_runs_the_test_command_then_the_walkthroughs_and_between_them_every_test() -> None:
    """.ci/run runs exactly the Quickstart's second and third commands; the first leaves out
    `walkthrough` alone, the second selects it alone, and pytest's addopts select nothing."""
    ci = subprocess.run(["bash", str(ROOT / ".ci" / "run"), "--commands"], capture_output=True,
                        text=True, timeout=30, check=True, stdin=subprocess.DEVNULL)
    test_command, walkthrough_command = quickstart_commands()[1:3]
    assert ci.stdout.splitlines() == [test_command, walkthrough_command]
    assert _selection(_pytest_args(test_command)) == ["-m not walkthrough"]
    assert _selection(_pytest_args(walkthrough_command)) == ["-m walkthrough"]
    addopts = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())[
        "tool"]["pytest"]["ini_options"]["addopts"].split()
    assert not {"-m", "-k"} & set(addopts), addopts


#: The packaging and walk-through tests: each carries the marker.
MARKED = ("test_fresh_install.py", "test_docs_walkthrough.py", "test_docs_shell_walkthrough.py",
          "test_docs_criteria.py", "test_docs_integrations.py", "test_example_story.py",
          "test_example_roles.py", "test_readme_judges.py", "test_readme_rollout.py",
          "test_maintenance_doc.py")


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


#: (test command's status, walk-through command's, .ci/run's): the first failure's status,
#: pytest's 5 (no tests collected) counted as a failure (1), 0 only when both passed.
CI_STATUSES = ((0, 0, 0), (1, 0, 1), (0, 1, 1), (5, 0, 1), (0, 5, 1), (2, 3, 2), (124, 0, 124))


@pytest.mark.skipif(not Path("/usr/bin/chromium").is_file(),
                    reason=".ci/run would install chromium first (CI does; the tests never do)")
@pytest.mark.parametrize(("first", "second", "expected"), CI_STATUSES)
def test_ci_runs_both_commands_and_exits_with_the_first_failure(
        tmp_path: Path, first: int, second: int, expected: int) -> None:
    """.ci/run (under set -euo pipefail) runs the walk-through command even when the test
    command failed, and exits 0 only when both passed; shown on a copy of it beside a
    README whose two commands only print and exit with the given statuses."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    (tmp_path / "README.md").write_text(
        "# x\n\n## Quickstart\n\n```sh\necho setup\n```\n\n"
        f"```sh\necho first-ran; exit {first}\n```\n\n```sh\necho second-ran; exit {second}\n```\n"
        "\n## Next\n\n```sh\necho never\n```\n")
    env: dict[str, Any] = {"PATH": "/usr/bin:/bin", "CI": "true", "ROLEGATE_CHECKOV": "-"}
    ci = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
                        timeout=30, env=env, stdin=subprocess.DEVNULL)
    ran = [line for line in ci.stdout.splitlines() if line.endswith("-ran")]
    assert ran == ["first-ran", "second-ran"], ci.stdout + ci.stderr
    assert ci.returncode == expected, ci.stdout + ci.stderr
    assert ("pytest collected no tests" in ci.stderr) == (5 in (first, second)), ci.stderr


def test_no_test_id_is_longer_than_a_kilobyte(request: pytest.FixtureRequest) -> None:
    """Of the tests collected with it (all of them in the README's run): pytest puts the
    running test's id in PYTEST_CURRENT_TEST, and every server a test starts inherits it. A
    parameter used as its own id (a 200 KB body) made execve refuse the first Redis such a
    test started ("Argument list too long")."""
    long = [item.nodeid[:80] for item in request.session.items if len(item.nodeid) > 1024]
    assert long == []
