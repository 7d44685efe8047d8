"""A small chat-completions judge on loopback for the tests: deterministic from the run's text.

It answers the online criteria request (`gatekeeper.judging`): every asked key
passes, except `instruction:tone`, which fails when the run's output promises
a date ("we promise"). It answers the blind pairwise request (the prompt of
`gatekeeper.judge_pairwise`) with the judge's JSON answer: the trace whose output
promises a date or says "we cannot help" loses, else a tie. Its `mode` makes it misbehave: "500" answers an error,
"garbage" answers content that is not the JSON asked for, "slow" answers after
`delay` seconds, "flaky" flips the `instruction:tone` verdict on every second
ask of the same run (a judge that disagrees with itself). It records every request it got.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEYS = re.compile(r'"key": "([^"]+)"')


@dataclass
class JudgeServer:
    """What the judge does and what it was asked."""

    url: str = ""
    mode: str = "ok"
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def verdicts(user: str) -> dict[str, Any]:
    """The criteria verdicts for one request's user message."""
    output = user.split("OUTPUT:\n", 1)[1].split("\n\nCRITERIA:", 1)[0]
    out = {}
    for key in KEYS.findall(user):
        failed = key == "instruction:tone" and "we promise" in output.lower()
        out[key] = {"pass": not failed, "reason": "promises a date" if failed else "ok"}
    return {"criteria": out}


#: Words that make a run lose a blind pairwise comparison (the judge_pairwise request).
LOSING = ("we promise", "we cannot help")


def pairwise(user: str) -> dict[str, Any]:
    """The answer to one pairwise request: the side whose output has a LOSING word loses."""
    first = user.split("--- EXECUTION TRACE A ---\n", 1)[1].split("\n\n--- EXECUTION TRACE B", 1)[0]
    second = user.split("--- EXECUTION TRACE B ---\n", 1)[1]
    bad_a, bad_b = (any(w in json.loads(t)["final_output"].lower() for w in LOSING)
                    for t in (first, second))
    winner, delta = ("BASELINE", -2.0) if bad_b and not bad_a else (
        ("CANDIDATE", 2.0) if bad_a and not bad_b else ("TIE", 0.0))
    return {"winner": winner, "score_delta": delta,
            "criteria_scores": {"correctness_delta": delta, "efficiency_delta": 0.0,
                                "tool_accuracy_delta": 0.0, "safety_delta": 0.0},
            "regression_detected": winner == "BASELINE",
            "reasoning": "B is worse" if winner == "BASELINE" else "no regression in B",
            "flagged_issues": ["unhelpful answer"] if winner == "BASELINE" else []}


@contextmanager
def judge_server() -> Iterator[JudgeServer]:
    """Serve the judge on a free loopback port until the block ends."""
    state = JudgeServer()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append(body)
                state.headers.append(dict(self.headers))
            if state.mode == "slow":
                time.sleep(state.delay)
            if state.mode == "500":
                self._send(500, {"error": {"message": "judge is down"}})
                return
            user = body["messages"][-1]["content"]
            system = body["messages"][0]["content"]
            answer = pairwise(user) if system.startswith("You are an expert") else verdicts(user)
            with state.lock:
                asked = sum(1 for r in state.requests if r["messages"][-1]["content"] == user)
            if state.mode == "flaky" and asked % 2 == 0:
                tone = answer.get("criteria", {}).get("instruction:tone")
                if tone is not None:
                    tone["pass"] = not tone["pass"]
            content = "I think it is fine." if state.mode == "garbage" else json.dumps(answer)
            self._send(200, {"choices": [{"message": {"role": "assistant", "content": content}}],
                             "usage": {"total_tokens": len(user) // 4 + 20}})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): nothing to answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
