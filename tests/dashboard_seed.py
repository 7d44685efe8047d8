"""Seed data for the dashboard tests: three roles in different stages, with traces.

Used through the HTTP API only (a Flask test client or a requests session), so
the dashboard reads exactly what a real deployment would have stored.
"""

from __future__ import annotations

import random
import time
from typing import Any, Protocol

from tests.conftest import CALLER, OPERATOR, auth

STAMPS = {"agent_version": "1.4.0", "instruction_hash": "ih-7", "model_id": "model-x",
          "tool_schema_hash": "ts-3"}
GATE = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["send_email"], "required_tools": ["search"],
                       "max_steps": 6}}


class Poster(Protocol):
    """What the seed needs from a client: put and post with JSON and headers."""

    def put(self, url: str, *, json: Any, headers: dict[str, str]) -> Any: ...

    def post(self, url: str, *, json: Any, headers: dict[str, str]) -> Any: ...


def _status(response: Any) -> int:
    return int(response.status_code)


def trace(role: str, config: str, arm: str, key: str, tools: list[str], when: float,
          cost: float = 0.01) -> dict[str, Any]:
    """One trace body."""
    return {"run_id": f"{role}-{arm}-{key}", "role": role, "config": config, "arm": arm,
            "key": key, "tools": tools, "stamps": STAMPS, "time": when, "cost_usd": cost}


def seed(client: Poster, base: str = "") -> None:
    """Create summarizer (canary 0.5), classifier (shadow) and extractor (stable), with traces."""
    rng = random.Random(7)
    ops = auth(OPERATOR)
    for role, current, candidate in (("summarizer", "sum-v1", "sum-v2"),
                                     ("classifier", "cls-v3", "cls-v4"),
                                     ("extractor", "ext-v1", None)):
        body: dict[str, Any] = {"current": current, "gate": GATE,
                                "description": f"{role} agent"}
        if candidate:
            body["candidate"] = candidate
        r = client.put(f"{base}/v1/bindings/{role}", json=body, headers=ops)
        assert _status(r) == 201, r
    moves = [("summarizer", "promote", {"reason": "offline suite passed"}),
             ("summarizer", "canary", {"share": 0.5, "reason": "shadow looked clean"}),
             ("classifier", "promote", {"reason": "start shadowing v4"})]
    for role, action, payload in moves:
        r = client.post(f"{base}/v1/bindings/{role}/{action}", json=payload, headers=ops)
        assert _status(r) == 200, r
    now = time.time()
    batch = []
    for i in range(60):
        when = now - 600 + i * 10
        ok = ["search", "summarize"]
        batch.append(trace("summarizer", "sum-v1", "current", f"s{i}",
                           ok if rng.random() < 0.9 else ["search"] * 8, when))
        # The candidate gets worse over time: the CUSUM climbs.
        bad = rng.random() < (0.1 if i < 30 else 0.45)
        batch.append(trace("summarizer", "sum-v2", "candidate", f"s{i}b",
                           ["search"] * 8 if bad else ok, when + 1))
        batch.append(trace("classifier", "cls-v3", "current", f"c{i}", ["search", "label"],
                           when))
        shadow_tools = ["search", "label"] if i % 5 else ["search", "lookup", "label"]
        if i % 11 == 0:
            shadow_tools = ["label", "search"]
        batch.append(trace("classifier", "cls-v4", "shadow", f"c{i}", shadow_tools, when + 2))
        batch.append(trace("extractor", "ext-v1", "current", f"e{i}", ["search", "extract"],
                           when))
    for start in range(0, len(batch), 100):
        r = client.post(f"{base}/v1/traces", json={"traces": batch[start:start + 100]},
                        headers=auth(CALLER))
        assert _status(r) in (200, 207), r
