"""Helpers for the offline suite's tests: suites built in tmp_path, a counting tool server."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.suite.scenario import AgentConfig, Suite, load_config, load_suite

AGENT = f"{sys.executable} {Path(__file__).with_name('suite_agent.py')}"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_AGENT = f"{sys.executable} {EXAMPLES / 'agent.py'}"

WORKSPACE_TOOLS = {
    "read_file": {"kind": "workspace", "parameters": {"required": ["path"]}},
    "write_file": {"kind": "workspace", "parameters": {"required": ["path", "content"]}},
    "list_files": {"kind": "workspace"},
}


def make_suite(root: Path, scenarios: list[dict[str, Any]],
               tools: dict[str, Any] | None = None,
               seeds: dict[str, str] | None = None,
               credentials: dict[str, str] | None = None) -> Suite:
    """Write a suite directory under `root` and load it."""
    (root / "scenarios").mkdir(parents=True, exist_ok=True)
    for name, text in (seeds or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for scenario in scenarios:
        (root / "scenarios" / f"{scenario['id']}.json").write_text(json.dumps(scenario))
    catalog = {"tools": {**WORKSPACE_TOOLS, **(tools or {})},
               "credentials": credentials or {}}
    (root / "tools.json").write_text(json.dumps(catalog))
    return load_suite(root)


def make_config(root: Path, name: str, **script: Any) -> AgentConfig:
    """Write a scripted agent's config and load it."""
    path = root / f"{name}.json"
    path.write_text(json.dumps({"name": name, **script}))
    return load_config(path)


class LoopbackJSONServer:
    """A real HTTP server on loopback whose POSTs are answered by `answer(body, headers)`."""

    path = "/"

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                """Read the body, let the owner answer, send its JSON."""
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = json.dumps(owner.answer(raw, self.headers)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def answer(self, body: bytes, headers: Any) -> Any:
        """The JSON to answer one POST with."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The server's URL, at `path`."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{self.path}"

    def close(self) -> None:
        """Stop and release the socket."""
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()


class CountingTool(LoopbackJSONServer):
    """A real HTTP tool on loopback that counts the calls it actually executes."""

    path = "/send"

    def __init__(self) -> None:
        self.calls = 0
        self.authorization: list[str | None] = []
        super().__init__()

    def answer(self, body: bytes, headers: Any) -> Any:
        """Count, then answer."""
        self.calls += 1
        self.authorization.append(headers.get("Authorization"))
        return {"sent": True, "count": self.calls}


@pytest.fixture
def counting_tool() -> Iterator[CountingTool]:
    """A live side-effecting tool that counts its real executions."""
    tool = CountingTool()
    yield tool
    tool.close()
