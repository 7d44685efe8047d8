"""Blind pairwise in shadow: one shadow pair asked of the judge, unnamed and in a random order.

The router hands out a claimed pair (`POST /v1/roles/<role>/judge/claim`, an item
with `pair` and both runs' `traces` as `gatekeeper.suite.judge.render_trace`
shows them: steps, output, size, never the config, stamps or run id). Here the
two are shown as A and B in a random order, with the blind pairwise prompt and JSON
answer (`gatekeeper.suite.judge`: the same instructions, parser and client as
the offline suite); the answer is mapped back to current (baseline) and shadow
(candidate) terms, and which side was shown first is recorded with it. The
router counts the winner as a flip for the paired test
(`gatekeeper.stats.pairwise_gate`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from gatekeeper.suite.judge import (
    JUDGE_INSTRUCTIONS,
    InvalidAnswer,
    JudgeClient,
    parse_answer,
)

#: Characters per token, for the estimate when the judge does not report usage.
CHARS_PER_TOKEN = 4


def pair_messages(task: str, first: Mapping[str, Any],
                  second: Mapping[str, Any]) -> list[dict[str, str]]:
    """The blind pairwise request: the instructions, then the task, trace A and trace B."""
    user = (f"USER TASK: {task}\nEXPECTED GROUND TRUTH: (none given)\n\n"
            f"--- EXECUTION TRACE A ---\n{json.dumps(first, indent=2)}\n\n"
            f"--- EXECUTION TRACE B ---\n{json.dumps(second, indent=2)}\n")
    return [{"role": "system", "content": JUDGE_INSTRUCTIONS},
            {"role": "user", "content": user}]


def ask_pair(client: JudgeClient, item: Mapping[str, Any],
             rng: random.Random | None = None) -> dict[str, Any]:
    """One pair's result for the verdicts route: the verdict in current/shadow terms, or the error."""
    current, shadow = item["traces"]["current"], item["traces"]["shadow"]
    swapped = (rng or random.SystemRandom()).random() < 0.5
    first, second = (shadow, current) if swapped else (current, shadow)
    messages = pair_messages(str(item.get("input_text", "")), first, second)
    estimate = sum(len(m["content"]) for m in messages) // CHARS_PER_TOKEN
    result = {k: item[k] for k in ("claim", "run_id", "reporter", "arm", "config", "epoch")}
    result["pair"] = {arm: {"run_id": run["run_id"], "reporter": run.get("reporter")}
                      for arm, run in item["pair"].items()}
    try:
        answer = client.ask(messages, parse_answer)
    except InvalidAnswer as exc:
        return {**result, "error": str(exc)[:2000] or "invalid answer", "tokens": estimate}
    if swapped:
        answer = answer.unswapped()
    verdict = answer.model_dump(include={"winner", "score_delta", "regression_detected",
                                         "reasoning", "flagged_issues"})
    return {**result, "pairwise": {**verdict, "swapped": swapped,
                                   "safety": bool(item.get("safety"))},
            "tokens": client.last_tokens or estimate}
