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


class CountingTool:
    """A real HTTP tool on loopback that counts the calls it actually executes."""

    def __init__(self) -> None:
        self.calls = 0
        self.authorization: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                """Quiet."""

            def do_POST(self) -> None:  # noqa: N802
                """Count, then answer."""
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.calls += 1
                owner.authorization.append(self.headers.get("Authorization"))
                body = json.dumps({"sent": True, "count": owner.calls}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """The tool's URL."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/send"

    def close(self) -> None:
        """Stop and release the socket."""
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()


@pytest.fixture
def counting_tool() -> Iterator[CountingTool]:
    """A live side-effecting tool that counts its real executions."""
    tool = CountingTool()
    yield tool
    tool.close()
