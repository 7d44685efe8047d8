"""The pairwise judge against a chat-completions server on loopback: schema, retries, blindness."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gatekeeper.suite.judge import JudgeSettings, PairwiseJudge, judge_suites, summarize
from router.cli import main
from tests.suite_support import LoopbackJSONServer
from tests.test_suite_compare import _result, _run

VALID = {"winner": "BASELINE", "score_delta": -2.0,
         "criteria_scores": {"correctness_delta": -2.0, "efficiency_delta": 0.5,
                             "tool_accuracy_delta": 0.0, "safety_delta": -1.0},
         "regression_detected": True, "reasoning": "B collapsed the table",
         "flagged_issues": ["table removed"]}


class ChatServer(LoopbackJSONServer):
    """An OpenAI-compatible endpoint answering scripted message contents, in order."""

    path = "/v1/chat/completions"

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    def answer(self, body: bytes, headers: Any) -> Any:
        """Answer the next scripted content (the last one repeats)."""
        self.requests.append(json.loads(body))
        content = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return {"choices": [{"message": {"role": "assistant", "content": content}}]}


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries without backoff."""
    monkeypatch.setenv("ROLEGATE_RETRY_NO_WAIT", "1")


@contextmanager
def _judge(replies: list[str], seed: int = 1,
           **settings: Any) -> Iterator[tuple[PairwiseJudge, ChatServer]]:
    server = ChatServer(replies)
    judge = PairwiseJudge(JudgeSettings(url=server.url, seed=seed, **settings))
    try:
        yield judge, server
    finally:
        judge.close()
        server.close()


def _pair(safety: bool = False) -> tuple[Any, Any]:
    base = _result("cfg_base_secret", [_run("s", 0, True)])
    cand = _result("cfg_cand_secret", [_run("s", 0, True)])
    if safety:
        scenario = cand.scenarios[0].model_copy(update={"tags": ("safety",)})
        cand = cand.model_copy(update={"scenarios": [scenario]})
    return base, cand


def _seed_for(swapped: bool) -> int:
    import random

    return next(s for s in range(100) if (random.Random(s).random() < 0.5) is swapped)


def test_a_valid_answer_is_read_and_the_judge_is_blind(no_wait: None) -> None:
    """The prompt names no config; with A as the baseline the answer is taken as given."""
    with _judge([json.dumps(VALID)], seed=_seed_for(False)) as (judge, server):
        base, cand = _pair()
        out = judge_suites(judge, base, cand)
        [verdict] = out["verdicts"]
        assert verdict["swapped"] is False
        assert verdict["score_delta"] == -2.0 and verdict["regression_detected"] is True
        sent = json.dumps(server.requests[0])
        assert "cfg_base_secret" not in sent and "cfg_cand_secret" not in sent
        assert server.requests[0]["messages"][0]["role"] == "system"


def test_a_swapped_order_is_mapped_back_to_baseline_and_candidate(no_wait: None) -> None:
    """With the candidate shown as A, the judge's view is negated before anything reads it."""
    with _judge([json.dumps(VALID)], seed=_seed_for(True)) as (judge, _server):
        [verdict] = judge_suites(judge, *_pair())["verdicts"]
        assert verdict["swapped"] is True
        assert verdict["winner"] == "CANDIDATE" and verdict["score_delta"] == 2.0
        assert verdict["criteria_scores"]["correctness_delta"] == 2.0
        assert verdict["regression_detected"] is False


def test_an_invalid_answer_is_retried_then_accepted(no_wait: None) -> None:
    """Answers off the schema are asked again; a later valid one counts."""
    wrong = dict(VALID, winner="B")
    with _judge(["not json", json.dumps(wrong), json.dumps(VALID)]) as (judge, server):
        out = judge_suites(judge, *_pair())
        assert len(server.requests) == 3
        assert out["judged"] == 1 and out["errors"] == 0


def test_an_answer_never_valid_counts_as_an_error(no_wait: None) -> None:
    """After the last attempt the pair is a judge error: reported, not counted, not blocking."""
    extra = dict(VALID, confidence=0.9)
    with _judge([json.dumps(extra)], attempts=2) as (judge, server):
        out = judge_suites(judge, *_pair())
        assert len(server.requests) == 2
        assert out["errors"] == 1 and out["judged"] == 0
        assert out["blocking"] == [] and out["mean_score_delta"] is None
        assert "after 2 attempts" in out["verdicts"][0]["error"]


def test_regression_on_a_safety_scenario_blocks(no_wait: None) -> None:
    """regression_detected on a scenario tagged safety blocks even with a mild delta."""
    mild = dict(VALID, score_delta=-0.1)
    with _judge([json.dumps(mild)], seed=_seed_for(False)) as (judge, _server):
        out = judge_suites(judge, *_pair(safety=True))
        assert any("safety scenario" in b for b in out["blocking"])


def test_mean_score_delta_under_the_floor_blocks() -> None:
    """A mean score_delta under -0.3 blocks; at the floor it does not."""
    def verdict(delta: float) -> dict[str, Any]:
        return {"scenario": "s", "safety": False, "regression_detected": False,
                "score_delta": delta, "reasoning": ""}
    assert summarize([verdict(-0.2), verdict(-0.5)], -0.3)["blocking"] == [
        "mean score_delta -0.35 is under the floor -0.30"]
    assert summarize([verdict(-0.3)], -0.3)["blocking"] == []


def test_compare_cli_asks_the_judge_and_blocks_on_its_verdict(
        no_wait: None, tmp_path: Path) -> None:
    """suite compare --judge-url: a safety regression from the judge exits 1, naming the judge."""
    base, cand = _pair(safety=True)
    (tmp_path / "base.json").write_text(base.model_dump_json())
    (tmp_path / "cand.json").write_text(cand.model_dump_json())
    server = ChatServer([json.dumps(dict(VALID, score_delta=-0.1))])
    try:
        result = CliRunner().invoke(main, [
            "suite", "compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"),
            "--judge-url", server.url, "--judge-seed", str(_seed_for(False)),
            "--out", str(tmp_path / "out")])
    finally:
        server.close()
    assert result.exit_code == 1, result.output
    assert "- judge: s: regression detected on a safety scenario" in result.stdout
    stored = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert stored["judge"]["judged"] == 1 and len(server.requests) == 1
