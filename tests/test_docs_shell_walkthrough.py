"""Every shell walk-through in README.md and docs/ runs, in order, as written.

A shell step is a `$ ` line of an unlabelled block (its output is the lines up
to the next `$ `) or a line of a `sh`/`bash` block (no output shown). A block
marked illustrative (see tests/test_docs_walkthrough.py) is shown, not run.
Each page's steps run in order, one shell each, from a scratch directory that
holds the repository's `examples/`, against a fresh open router on a free loopback port (its `127.0.0.1:8080` URLs pointed at it); the page's
`/tmp/` paths are pointed into the test's own directory; every output line the
page shows (a `...` line stands for lines left out) must be printed, in order
(a timing row by its label only: timings differ per machine).

Pages whose walk-through another test runs are listed in RUN_ELSEWHERE, so
nothing runs twice; the inventory test fails for a page with runnable shell
steps that no test runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from router import create_app
from tests.servers import base_env, werkzeug_server
from tests.test_docs_walkthrough import PAGES, ROOT, blocks, illustrative

SHELL = {"sh", "bash", "shell", "console"}
#: Shown lines whose figures are timings, which differ per machine: matched by this prefix.
TIMINGS = ("| latency_s |",)
#: Pages whose shell walk-through runs in a test of its own.
RUN_ELSEWHERE = {
    "README.md": "tests/test_readme_rollout.py, tests/test_readme_judges.py",
    "docs/criteria-and-golden-sets.md": "tests/test_docs_criteria.py",
    "docs/maintenance.md": "tests/test_maintenance_doc.py",
}
#: Pages this test runs (each command must exit 0 unless the page shows its `echo $?`).
RUN_HERE = {"docs/offline-suite.md", "docs/integrations/google-adk.md",
            "docs/integrations/langgraph.md", "docs/integrations/openai-agents.md",
            "docs/integrations/pydantic-ai.md"}


def shell_steps(page: Path) -> list[tuple[str, list[str], int]]:
    """(command, output lines shown, line) of each runnable shell step of `page`, in order."""
    steps: list[tuple[str, list[str], int]] = []
    previous: tuple[str, str] | None = None
    for language, body, line in blocks(page):
        if illustrative(body):
            previous = None
            continue
        lines = body.splitlines()
        if language in SHELL:
            steps.extend((text, [], line) for text in lines
                         if text.strip() and not text.lstrip().startswith("#"))
            previous = (language, body)
            continue
        if not language and not any(text.startswith("$ ") for text in lines):
            # An unlabelled block right after a shell block is its last command's output.
            if previous is not None and previous[0] in SHELL and steps and not steps[-1][1]:
                steps[-1][1].extend(text for text in lines if text.strip())
            previous = (language, body)
            continue
        previous = (language, body)
        if language:
            continue
        index = 0
        while index < len(lines):
            text = lines[index]
            index += 1
            if not text.startswith("$ "):
                if steps and text.strip():
                    steps[-1][1].append(text)
                continue
            command = text[2:]
            while command.endswith("\\") and index < len(lines):
                command = command[:-1] + " " + lines[index].strip()
                index += 1
            steps.append((command, [], line + index))
    return steps


def test_every_shell_walkthrough_is_run_by_a_test() -> None:
    """A page with runnable shell steps is run here or by the test RUN_ELSEWHERE names."""
    unrun = [str(page.relative_to(ROOT)) for page in PAGES if shell_steps(page)
             and str(page.relative_to(ROOT)) not in RUN_HERE | set(RUN_ELSEWHERE)]
    assert unrun == [], "shell steps no test runs (mark them illustrative with why, or run them)"


def expected_exit(steps: list[tuple[str, list[str], int]], index: int) -> int:
    """The exit code the page shows for step `index` (the `echo $?` after it), else 0."""
    after = steps[index + 1] if index + 1 < len(steps) else None
    return int(after[1][0]) if after and after[0] == "echo $?" and after[1] else 0


def same(printed: str, shown: str) -> bool:
    """Whether a printed line is the shown one (a timing line by its label only)."""
    timing = next((prefix for prefix in TIMINGS if shown.startswith(prefix)), None)
    if timing is not None:
        return printed.startswith(timing)
    return printed.rstrip() == shown.rstrip()


def shows(output: list[str], shown: list[str]) -> str | None:
    """The first shown line not printed in that order (`...` skips ahead), or None."""
    at = 0
    for line in shown:
        if line.strip() == "...":
            continue
        while at < len(output) and not same(output[at], line):
            at += 1
        if at == len(output):
            return line
        at += 1
    return None


@pytest.fixture
def open_router(redis_url: str) -> Iterator[str]:
    """A fresh open router on a free loopback port, as the quickstart runs it; its URL."""
    app: Flask = create_app({"redis_url": redis_url, "testing": True,
                             "refresh_interval_s": 0.05})
    try:
        with werkzeug_server(app) as url:
            yield url
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


@pytest.mark.slow
@pytest.mark.walkthrough
@pytest.mark.parametrize("page", sorted(RUN_HERE))
def test_each_pages_shell_steps_run_in_order(page: str, open_router: str,
                                             tmp_path: Path) -> None:
    """Each command exits as the page says and prints the lines the page shows, in order."""
    steps = shell_steps(ROOT / page)
    assert steps, f"{page} has no shell steps"
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    env = {**base_env(ROLEGATE_URL=open_router),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    scratch = f"{tmp_path}/"
    for index, (command, shown, line) in enumerate(steps):
        if command == "echo $?":
            continue  # the exit code is checked on the command before it
        # The page writes under /tmp; the test under its own directory.
        run = command.replace("/tmp/", scratch).replace("http://127.0.0.1:8080", open_router)
        done = subprocess.run(["bash", "-c", run], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
        printed = done.stdout.replace(scratch, "/tmp/")
        # A progress bar redraws its line with carriage returns: keep what stays on screen.
        output = [text.rsplit("\r", 1)[-1] for text in printed.splitlines()]
        assert done.returncode == expected_exit(steps, index), (page, line, command,
                                                                printed[-3000:])
        missing = shows(output, shown)
        assert missing is None, (page, line, command, missing, printed[-3000:])
