"""The README's "A rollout, step by step" runs as written against a router seeded like the quickstart."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask

from router import create_app
from router.cli.main import main
from tests.servers import werkzeug_server

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## A rollout, step by step"
ECHO_STATUS = "; echo $?"
#: Clock times differ per run (a later one may carry its date), and so does the salt a
#: rollout draws: one placeholder each.
TIMES = [(re.compile(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC"), "<time>"),
         (re.compile(r"salt [0-9a-f]{16}\b"), "salt <drawn>")]


def walkthrough() -> list[tuple[str, list[str]]]:
    """Each `$ command` of the section with the output lines shown under it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
    return steps


def normal(line: str) -> str:
    """A line with its clock times replaced by placeholders."""
    for pattern, placeholder in TIMES:
        line = pattern.sub(placeholder, line)
    return line.rstrip()


@pytest.fixture
def open_router(redis_url: str) -> Iterator[str]:
    """The router as the quickstart runs it (no tokens: open, actor 'anonymous'), seeded."""
    app: Flask = create_app({"redis_url": redis_url, "testing": True,
                             "refresh_interval_s": 0.05})
    try:
        with werkzeug_server(app) as url:
            seeded = CliRunner().invoke(main, ["bindings", "import",
                                               str(ROOT / "bindings.example.json")],
                                        env={"ROLEGATE_URL": url}, catch_exceptions=False)
            assert seeded.exit_code == 0, seeded.output
            yield url
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


@pytest.mark.walkthrough
def test_the_rollout_walkthrough_runs_as_written(open_router: str) -> None:
    """Every command of the section succeeds (or fails as shown) and prints what is shown."""
    steps = walkthrough()
    assert len(steps) >= 10
    for command, shown in steps:
        echo = command.endswith(ECHO_STATUS)
        argv = shlex.split(command.removesuffix(ECHO_STATUS))
        assert argv[0] == "rolegate", command
        result = CliRunner().invoke(main, argv[1:], env={"ROLEGATE_URL": open_router,
                                                         "ROLEGATE_RETRY_NO_WAIT": "1"},
                                    catch_exceptions=False)
        lines = [normal(line) for line in (result.stdout + result.stderr).splitlines()]
        if echo:
            lines.append(str(result.exit_code))
        elif not any(line.startswith("error:") for line in shown):
            assert result.exit_code == 0, (command, result.output)
        # The shown lines appear in this order; "..." stands for lines left out.
        position = 0
        for expected in (normal(line) for line in shown if line.strip() != "..."):
            while position < len(lines) and lines[position] != expected:
                position += 1
            assert position < len(lines), (
                f"{command!r}: {expected!r} not in the output (in order):\n" + "\n".join(lines))
            position += 1
