#!/usr/bin/env python3
"""A deterministic stand-in for an LLM judge, for the online-judges walk-through (no LLM).

It serves an OpenAI-compatible chat-completions endpoint at
http://127.0.0.1:PORT/v1/chat/completions and answers rolegate's criteria request
(`gatekeeper.judging`): every criterion key asked passes, except `instruction:tone`
("Be brief and polite; never promise a date"), which fails when the run's output
promises a date ("we promise"). It refuses a request without a bearer token.

    python examples/refunds/judge.py --port 8090

Stdlib only, so it runs with any Python 3.11.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEYS = re.compile(r'"key": "([^"]+)"')


def verdicts(user: str) -> dict[str, Any]:
    """The criteria verdicts for one request's user message."""
    output = user.split("OUTPUT:\n", 1)[-1].split("\n\nCRITERIA:", 1)[0]
    out = {}
    for key in KEYS.findall(user):
        failed = key == "instruction:tone" and "we promise" in output.lower()
        out[key] = {"pass": not failed, "reason": "promises a date" if failed else "ok"}
    return {"criteria": out}


class Handler(BaseHTTPRequestHandler):
    """POST /v1/chat/completions, answered in the chat-completions shape."""

    def log_message(self, *args: Any) -> None:
        """Quiet: the walk-through's shell shows the router's lines, not the judge's."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        """Answer one criteria request."""
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if not self.headers.get("Authorization", "").startswith("Bearer "):
            self._send(401, {"error": {"message": "no API key"}})
            return
        user = body["messages"][-1]["content"]
        self._send(200, {"choices": [{"message": {"role": "assistant",
                                                  "content": json.dumps(verdicts(user))}}],
                         "usage": {"total_tokens": len(user) // 4 + 20}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def main() -> None:
    """Serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8090)
    port = parser.parse_args().port
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
