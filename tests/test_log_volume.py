"""Logs that fit a disk: resolves and OFREP evaluations sampled, state changes always written,
ROLEGATE_LOG_LEVEL=warning silencing the info lines (a real gunicorn router, lines counted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from router.server.logs import Sampler
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import base_env, gunicorn

RESOLVES = 400
EVALUATIONS = 100


def test_the_sampler_takes_exactly_its_share() -> None:
    """1 in 100 of 1,000 calls is 10, the first of each hundred; 0 none; 1 every one."""
    sample = Sampler(0.01)
    taken = [i for i in range(1000) if sample.take()]
    assert len(taken) == 10 and taken[:2] == [0, 100]
    assert not any(Sampler(0.0).take() for _ in range(100))
    assert all(Sampler(1.0).take() for _ in range(100))
    third = Sampler(1 / 3)
    assert sum(third.take() for _ in range(300)) == 100


def _traffic(url: str) -> None:
    """A binding, RESOLVES resolves (fast path and Flask), EVALUATIONS OFREP calls, a rollback."""
    r = requests.put(f"{url}/v1/bindings/summarizer", headers=auth(OPERATOR), timeout=10,
                     json={"current": "cfg_a", "candidate": "cfg_b"})
    assert r.status_code == 201, r.text
    r = requests.post(f"{url}/v1/bindings/summarizer/canary", headers=auth(OPERATOR),
                      json={"share": 0.5, "reason": "try"}, timeout=10)
    assert r.status_code == 200, r.text
    with requests.Session() as session:
        for i in range(RESOLVES):
            # Half plain (the fast path), half with a second parameter (through Flask).
            query = f"key=job-{i}" if i % 2 else f"key=job-{i}&x=1"
            r = session.get(f"{url}/v1/resolve/summarizer?{query}", headers=auth(CALLER),
                            timeout=10)
            assert r.status_code == 200, r.text
        for i in range(EVALUATIONS):
            r = session.post(f"{url}/ofrep/v1/evaluate/flags/summarizer", headers=auth(CALLER),
                             json={"context": {"targetingKey": f"job-{i}"}}, timeout=10)
            assert r.status_code == 200, r.text
    r = requests.post(f"{url}/v1/bindings/summarizer/rollback", headers=auth(OPERATOR),
                      json={"reason": "p95 steps up"}, timeout=10)
    assert r.status_code == 200, r.text


def _json_lines(path: Path) -> list[dict[str, Any]]:
    found = []
    for text in path.read_text(errors="replace").splitlines():
        if text.startswith("{"):
            found.append(json.loads(text))
    return found


def _run(redis_url: str, tmp_path: Path, **env: str) -> list[dict[str, Any]]:
    output = tmp_path / "router.log"
    # One worker: the 1-in-100 count is then exact for the whole router.
    with gunicorn(base_env(REDIS_URL=redis_url, ROLEGATE_TOKENS=TOKENS, **env), workers=1,
                  output=output) as url:
        _traffic(url)
    return _json_lines(output)  # the router has exited: every batched line is written


def test_by_default_one_evaluation_in_a_hundred_is_logged_and_every_change(
        redis_url: str, tmp_path: Path) -> None:
    """Defaults: 500 evaluations write 5 decision and 5 request lines; each write its line."""
    records = _run(redis_url, tmp_path)
    evaluated = [x for x in records if x.get("decision") == "resolve"]
    assert len(evaluated) == (RESOLVES + EVALUATIONS) // 100
    assert all(x["sampled"] == 0.01 for x in evaluated)
    evaluation_requests = [x for x in records if x["type"] == "request" and (
        x["path"].startswith("/v1/resolve/") or x["path"].startswith("/ofrep/"))]
    assert len(evaluation_requests) == len(evaluated)
    changes = [x["decision"] for x in records if x["type"] == "decision"
               and x["decision"] != "resolve"]
    assert changes == ["replace", "canary", "rollback"]
    # What 122,000 evaluations cost now: the issue measured 52 MB at two lines each.
    per_evaluation = sum(len(json.dumps(x)) + 1 for x in evaluated + evaluation_requests) / (
        RESOLVES + EVALUATIONS)
    assert per_evaluation * 122_000 < 1_000_000


@pytest.mark.parametrize("level", ["warning", "WARNING"])
def test_level_warning_silences_info_lines_but_keeps_state_changes(
        redis_url: str, tmp_path: Path, level: str) -> None:
    """ROLEGATE_LOG_LEVEL=warning with every resolve sampled: no resolve or plain request line,
    yet each binding write and the rollback with its request line."""
    records = _run(redis_url, tmp_path, ROLEGATE_LOG_LEVEL=level, ROLEGATE_LOG_SAMPLE="1")
    assert not [x for x in records if x.get("decision") == "resolve"]
    assert [x["decision"] for x in records if x["type"] == "decision"] == [
        "replace", "canary", "rollback"]
    paths = [x["path"] for x in records if x["type"] == "request"]
    assert paths == ["/v1/bindings/summarizer", "/v1/bindings/summarizer/canary",
                     "/v1/bindings/summarizer/rollback"]


def test_sample_one_logs_every_evaluation(redis_url: str, tmp_path: Path) -> None:
    """ROLEGATE_LOG_SAMPLE=1 writes both lines of every resolve and evaluation, unmarked."""
    records = _run(redis_url, tmp_path, ROLEGATE_LOG_SAMPLE="1")
    evaluated = [x for x in records if x.get("decision") == "resolve"]
    assert len(evaluated) == RESOLVES + EVALUATIONS
    assert not any("sampled" in x for x in evaluated)
