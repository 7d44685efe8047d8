"""Honest answers: an unknown write outcome is a 504, a retry with its Idempotency-Key is safe,
and the CLI reads the role back and says what happened."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from router import create_app
from router.cli import main
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.population import STAMPS
from tests.reply_dropper import ReplyDropper
from tests.servers import OwnRedis, wait_for, werkzeug_server
from tests.test_otlp_ingest import export, root

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}


@pytest.fixture
def dropper() -> Iterator[ReplyDropper]:
    """A private redis-server behind a proxy that can lose one script's answer."""
    own = OwnRedis(persist=False)
    own.start()
    proxy = ReplyDropper(own.port)
    yield proxy
    proxy.close()
    own.close()


@pytest.fixture
def served(dropper: ReplyDropper) -> Iterator[str]:
    """The router talking to Redis through the proxy, with a role on a canary; its URL."""
    app: Flask = create_app({"redis_url": dropper.url, "tokens": TOKENS, "testing": True})
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                         timeout=10)
        assert r.status_code == 201  # also loads the compare-and-set script
        yield url
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _history(url: str) -> list[dict[str, object]]:
    r = requests.get(f"{url}/v1/bindings/summarizer/history", headers=auth(OPERATOR), timeout=10)
    entries: list[dict[str, object]] = r.json()["entries"]
    return entries


def test_lost_answer_is_504_and_a_retry_with_the_same_key_is_not_applied_twice(
        dropper: ReplyDropper, served: str) -> None:
    """A write whose answer was lost answers 504 outcome_unknown; its retry replays, once."""
    headers = {**auth(OPERATOR), "If-Match": "1", "Idempotency-Key": "pause-123"}
    dropper.arm()
    r = requests.post(f"{served}/v1/bindings/summarizer/pause", json={"reason": "hold"},
                      headers=headers, timeout=10)
    assert dropper.dropped.is_set()
    assert r.status_code == 504 and r.json()["error"]["code"] == "outcome_unknown"
    again = requests.post(f"{served}/v1/bindings/summarizer/pause", json={"reason": "hold"},
                          headers=headers, timeout=10)
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["version"] == 2 and again.json()["binding"]["paused"] is True
    assert [e["action"] for e in _history(served)] == ["pause", "create"]
    other = requests.post(f"{served}/v1/bindings/summarizer/resume", json={"reason": "go"},
                          headers={**auth(OPERATOR), "Idempotency-Key": "pause-123"},
                          timeout=10)
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"




def test_cli_reads_the_role_back_after_an_unknown_outcome(
        dropper: ReplyDropper, served: str) -> None:
    """The CLI, told the outcome is unknown, reads the role back and reports the move applied."""
    dropper.arm()
    result = CliRunner().invoke(main, ["canary", "summarizer", "0.5", "--reason", "widen",
                                       "--url", served, "--token", OPERATOR],
                                catch_exceptions=False)
    assert dropper.dropped.is_set()
    assert result.exit_code == 0, result.output
    assert "could not confirm the canary" in result.output
    assert "the canary was applied: summarizer went to version 2" in result.output
    assert "share 0.5" in result.output
    assert [e["action"] for e in _history(served)] == ["canary", "create"]


def test_a_change_short_of_its_replicas_is_504_and_the_cli_says_it_landed(
        redis_url: str) -> None:
    """ROLEGATE_MIN_REPLICAS unmet: 504 outcome_unknown (it IS applied, so never 503); the CLI
    names the replicas, reads the role back and reports the move applied."""
    app: Flask = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                             "min_replicas": 1, "replica_wait_ms": 20})
    try:
        with werkzeug_server(app) as url:
            r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY,
                             headers=auth(OPERATOR), timeout=10)
            assert r.status_code == 504 and r.json()["error"]["code"] == "outcome_unknown"
            assert r.json()["error"]["details"]["condition"] == "replication_timeout"
            result = CliRunner().invoke(main, ["canary", "summarizer", "0.5", "--reason",
                                               "widen", "--url", url, "--token", OPERATOR],
                                        catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert "only 0 of 1 replicas confirmed it" in result.output
            assert "the canary was applied: summarizer went to version 2" in result.output
            assert [e["action"] for e in _history(url)] == ["canary", "create"]
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def _trace(config: str, arm: str, run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "role": "summarizer", "config": config, "arm": arm,
            "key": "job-1", "tools": ["search"], "stamps": STAMPS}


def _trace_body(kind: str) -> tuple[dict[str, Any], str]:
    """A body of `kind` (single, batch, otlp) for role summarizer, and its first run id."""
    if kind == "single":
        return _trace("cfg_b", "candidate", "single-1"), "single-1"
    if kind == "batch":
        return {"traces": [_trace("cfg_b", "candidate", "batch-1"),
                           _trace("cfg_a", "current", "batch-2")]}, "batch-1"
    placed = {"rolegate.role": "summarizer", "rolegate.config": "cfg_b",
              "rolegate.arm": "candidate", "rolegate.key": "job-1",
              "rolegate.run_id": "otlp-1"}
    return export(root(**placed)), "otlp-1"


@pytest.mark.parametrize("kind", ["single", "batch", "otlp"])
def test_a_trace_stored_while_redis_stalled_is_504_never_503(
        kind: str, dropper: ReplyDropper, served: str) -> None:
    """Redis applies the ingest script and goes quiet: the POST is 504 outcome_unknown (not
    503, which says nothing was stored), and the same POST sent again finds it stored."""
    body, run_id = _trace_body(kind)
    warm = requests.post(f"{served}/v1/traces", json=_trace("cfg_a", "current", "warm"),
                         headers=auth(CALLER), timeout=20)
    assert warm.status_code == 200  # the ingest script is loaded: the next EVALSHA runs it
    dropper.arm(stall=True)
    r = requests.post(f"{served}/v1/traces", json=body, headers=auth(CALLER), timeout=20)
    assert dropper.dropped.is_set()
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "outcome_unknown"
    dropper.heal()
    again = wait_for(lambda: _stored_again(served, body), 20, "the retry to reach Redis")
    if kind != "otlp":  # an OTLP answer is the protocol's partial-success body
        statuses = {res["run_id"]: res["status"] for res in again.json()["results"]}
        assert statuses[run_id] == "duplicate", again.text  # stored by the first send


def _stored_again(url: str, body: dict[str, Any]) -> requests.Response | None:
    r = requests.post(f"{url}/v1/traces", json=body, headers=auth(CALLER), timeout=20)
    return r if r.status_code == 200 else None
