"""Each docs/integrations/*.md example runs as written against a router serving the example data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from router.api.traces import trace_store
from router.cli.serve import load_binding_file, seed_bindings
from router.server.services import services_of
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import base_env, werkzeug_server

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))
GLUE = "# rolegate glue: begin"

pytestmark = [pytest.mark.slow, pytest.mark.walkthrough]


def example(page: Path) -> tuple[str, str | None]:
    """The page's runnable Python block (the one with the glue markers) and its printed output."""
    text = page.read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, re.DOTALL)
    index = next(i for i, (lang, body) in enumerate(blocks) if lang == "python" and GLUE in body)
    after = blocks[index + 1] if index + 1 < len(blocks) else None
    printed = after[1] if after is not None and after[0] == "" else None
    return blocks[index][1], printed


@pytest.fixture
def example_router(app: Flask) -> Iterator[str]:
    """The router over HTTP, holding the shipped bindings.example.json."""
    # Loaded as `rolegate serve --seed` loads it (the Quickstart's router): as written,
    # unsalted, so job-42 falls where the pages say. A PUT would draw a rollout salt.
    created = seed_bindings(services_of(app).store,
                            load_binding_file(ROOT / "bindings.example.json"), "the example")
    assert created
    with werkzeug_server(app) as url:
        # The pages register the summarizer's config bodies first (examples/bodies/).
        for body in sorted((ROOT / "examples" / "bodies").glob("*.json")):
            r = requests.put(f"{url}/v1/configs/{body.stem}", data=body.read_bytes(),
                             headers={**auth(OPERATOR), "Content-Type": "application/json"},
                             timeout=5)
            assert r.status_code == 201, r.text
        yield url


def test_every_integration_has_a_page_with_a_runnable_example() -> None:
    """One page per integration, each with an example marking its glue."""
    assert {page.stem for page in PAGES} == {"pydantic-ai", "openai-agents", "google-adk",
                                             "langgraph", "opentelemetry"}
    for page in PAGES:
        assert example(page)[0]


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_the_example_runs_as_written(page: Path, example_router: str, app: Flask,
                                     tmp_path: Path) -> None:
    """Run the example in a fresh process; it prints what the page says, and the run is stored."""
    code, printed = example(page)
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False,
                          env=base_env(ROLEGATE_URL=example_router, ROLEGATE_TOKEN=CALLER))
    assert done.returncode == 0, done.stderr[-3000:]
    if printed is not None:
        assert done.stdout == printed
    else:
        run_id = done.stdout.split()[-1]
        assert trace_store(app).lookup("summarizer", run_id).trace.tools == ("read_file",)
    tally = requests.get(f"{example_router}/v1/roles/summarizer/tools", headers=auth(CALLER),
                         timeout=5).json()
    assert "read_file" in json.dumps(tally)
