"""docs/criteria-and-golden-sets.md runs as written: every command, every output line shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import OPERATOR
from tests.live import (
    LiveRouter,
    router,  # noqa: F401  (the pytest fixture the test below takes)
)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "criteria-and-golden-sets.md"
#: Commands that report a refusal by design, and the exit code they must give.
EXPECTED_EXIT = {"rolegate suite compare": 1}


def walkthrough(text: str) -> list[tuple[str, list[str]]]:
    """Each `$ ` command of the page's code blocks (continuation lines joined) and its output."""
    steps: list[tuple[str, list[str]]] = []
    for block in text.split("```")[1::2]:
        lines = block.splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            if not line.startswith("$ "):
                if steps and line.strip():
                    steps[-1][1].append(line)
                continue
            command = line[2:]
            while command.endswith("\\") and index < len(lines):
                command = command[:-1] + " " + lines[index].strip()
                index += 1
            steps.append((command, []))
    return steps


@pytest.mark.slow
@pytest.mark.walkthrough
def test_the_criteria_walkthrough_runs_as_written(router: LiveRouter, tmp_path: Path) -> None:
    """Each command exits as expected and prints every output line the page shows."""
    steps = walkthrough(DOC.read_text())
    assert len(steps) >= 15 and steps[0][0].startswith("export ROLEGATE_URL=")
    # Each command runs in a shell of its own: the page's `export` is applied here.
    env = {**os.environ, "ROLEGATE_URL": router.url, "ROLEGATE_TOKEN": OPERATOR,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    scratch = f"{tmp_path}/"
    for command, shown in steps[1:]:
        # The page writes under /tmp; the test under its own directory.
        run = command.replace("/tmp/", scratch)
        done = subprocess.run(["bash", "-c", run], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        output = (done.stdout + done.stderr).replace(scratch, "/tmp/")
        expected = next((code for prefix, code in EXPECTED_EXIT.items()
                         if command.startswith(prefix)), 0)
        assert done.returncode == expected, (command, output[-2000:])
        for line in shown:
            if "..." in line or line.startswith("#") and "against" not in line:
                continue
            assert line.strip() in output, (command, line, output[-3000:])
