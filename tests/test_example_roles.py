"""Every role of the shipped bindings.example.json can be judged, through every entry point.

The example's config ids (`summarizer@2026-10-02`, ...) go through the CLI's
import, the config registry (`rolegate criteria generate`), trace ingest, the
gate view, one gatekeeper tick, the dashboard and `rolegate golden build`, over
HTTP on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from router.cli import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import ROOT, base_env, werkzeug_server

EXAMPLE = ROOT / "bindings.example.json"
ROLES = json.loads(EXAMPLE.read_text())["roles"]
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
#: A tool each role's shipped invariants allow (support-triage requires set_label).
TOOL = {"summarizer": "read_thread", "support-triage": "set_label", "sql-analyst": "run_query"}


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router on a loopback port, with the shipped example imported through the CLI."""
    with werkzeug_server(app) as base:
        result = _cli(base, OPERATOR, "bindings", "import", str(EXAMPLE))
        assert result.exit_code == 0, result.output
        yield base


def _cli(url: str, token: str, *args: str) -> Any:
    return CliRunner().invoke(main, list(args),
                              env={"ROLEGATE_URL": url, "ROLEGATE_TOKEN": token})


def _arms(binding: dict[str, Any]) -> list[tuple[str, str]]:
    """(config, arm) of every arm the binding runs, as its callers would report them."""
    arms = [(binding["current"], "current")]
    if binding.get("candidate"):
        arms.append((binding["candidate"], "shadow" if binding["stage"] == "shadow"
                     else "candidate"))
    return arms


def _report(url: str, role: str, binding: dict[str, Any], runs: int) -> None:
    """Post `runs` traces per arm, each answered, with the input golden sets rebuild from."""
    traces = [{"run_id": f"{role}-{arm}-{i}", "role": role, "config": config, "arm": arm,
               "key": f"job-{i}", "tools": [TOOL[role]], "stamps": STAMPS,
               "output_text": "done", "input": {"task": f"job {i}"}}
              for config, arm in _arms(binding) for i in range(runs)]
    with requests.post(f"{url}/v1/traces", json={"traces": traces}, headers=auth(CALLER),
                       timeout=10) as answer:
        assert answer.status_code == 200, answer.text
        assert answer.json()["accepted"] == len(traces)


@pytest.mark.slow
@pytest.mark.walkthrough
def test_every_example_role_is_judged_everywhere(url: str, tmp_path: Path) -> None:
    """Specs register, traces count, gate views answer, a gatekeeper tick and the pages work."""
    for role, binding in ROLES.items():
        spec = tmp_path / f"{role}.json"
        spec.write_text(json.dumps({"tools": [{"name": TOOL[role], "required": True}]}))
        for config in {c for c, _ in _arms(binding)}:
            result = _cli(url, OPERATOR, "criteria", "generate", role, "--config", config,
                          "--spec", str(spec))
            assert result.exit_code == 0, result.output
            assert f"{config}: 2 criteria" in result.output
        _report(url, role, binding, 3)

    for role, binding in ROLES.items():
        with requests.get(f"{url}/v1/roles/{role}/gate", headers=auth(CALLER),
                          timeout=10) as answer:
            assert answer.status_code == 200, answer.text
            view = answer.json()
        for config, arm in _arms(binding):
            assert view["arms"][arm]["config"] == config and view["arms"][arm]["n"] == 3
        assert view["stage"] == binding["stage"]
        assert view["by_criterion"]["arms"]["current"]["criteria"][f"tool:{TOOL[role]}"]
        with requests.get(f"{url}/ui/roles/{role}", headers=auth(CALLER), timeout=10) as page:
            assert page.status_code == 200 and "Per criterion" in page.text
            assert binding["current"] in page.text

    tick = subprocess.run([sys.executable, "-m", "router.cli", "gatekeeper", "--once",
                           "--dry-run"], env=base_env(ROLEGATE_URL=url, ROLEGATE_TOKEN=GATEKEEPER),
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert tick.returncode == 0, tick.stderr
    decisions = {d["role"]: d for d in map(json.loads, tick.stdout.splitlines())}
    assert set(decisions) == set(ROLES)
    assert not any("failed" in d["reason"] for d in decisions.values()), decisions
    assert "ERROR" not in tick.stderr

    out = tmp_path / "golden"
    result = _cli(url, CALLER, "golden", "build", "summarizer", "--out", str(out),
                  "--min-age", "0")
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "golden.json").read_text())
    assert manifest["config"] == "summarizer@2026-10-02" and len(manifest["cases"]) == 3
