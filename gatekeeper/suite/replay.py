"""Record and replay of tool calls, served by a tool proxy on loopback.

`--record DIR` saves each run's tool calls and results as a fixture, with the
hash of every tool's schema. `--replay DIR` answers calls from those fixtures:
a call with no recorded match is an error for the agent and fails the run's
deterministic check (no silent fallback to the live tool), and a fixture whose
schema hashes differ from the suite's tools refuses to load at all.

The proxy is a small stdlib HTTP server, not the router: one per suite run, each
run reaching it under its own prefix (`/runs/<run_id>/tools/<tool>`).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gatekeeper.suite.isolation import CallRecord, RunContext
from gatekeeper.suite.scenario import SuiteError, ToolCatalog

FIXTURE_FILE_TEMPLATE = "{scenario}/{repeat:03d}.json"
MAX_BODY_BYTES = 10 * 1024 * 1024


class SchemaDrift(SuiteError):
    """A tool's schema changed since the fixture was recorded: the replay would lie."""

    code = "schema_drift"


class RecordedCall(BaseModel):
    """One call kept in a fixture."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None
    intercepted: bool = False


class Fixture(BaseModel):
    """One recorded run: its calls in order and the schema hash of every tool."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str
    repeat: int = Field(ge=0)
    run_id: str
    config: str
    tool_schemas: dict[str, str]
    calls: tuple[RecordedCall, ...]


def _call_key(tool: str, args: dict[str, Any]) -> str:
    return tool + "\0" + json.dumps(args, sort_keys=True, separators=(",", ":"))


def fixture_path(directory: Path, scenario: str, repeat: int) -> Path:
    """Where the fixture of (scenario, repeat) lives under `directory`."""
    return directory / FIXTURE_FILE_TEMPLATE.format(scenario=scenario, repeat=repeat)


def record_fixture(directory: Path, context: RunContext, *, scenario: str, repeat: int,
                   config: str) -> Path:
    """Write one run's calls as a fixture; return its path."""
    fixture = Fixture(
        scenario=scenario, repeat=repeat, run_id=context.run_id, config=config,
        tool_schemas=context.catalog.schema_hashes(),
        calls=tuple(RecordedCall(tool=c.tool, args=c.args, result=c.result, error=c.error,
                                 intercepted=c.intercepted) for c in context.calls),
    )
    path = fixture_path(directory, scenario, repeat)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fixture.model_dump_json(indent=2), encoding="utf-8")
    return path


def load_fixtures(directory: Path, catalog: ToolCatalog) -> dict[str, list[Fixture]]:
    """Every fixture under `directory` by scenario; SchemaDrift if any tool's schema moved."""
    if not directory.is_dir():
        raise SuiteError(f"{directory}: no such fixture directory", file=str(directory))
    current = catalog.schema_hashes()
    found: dict[str, list[Fixture]] = {}
    for path in sorted(directory.glob("*/*.json")):
        try:
            fixture = Fixture.model_validate_json(path.read_text(encoding="utf-8"))
        except ValidationError as exc:
            raise SuiteError(f"{path}: not a fixture: {exc.errors(include_url=False)[0]['msg']}",
                             file=str(path)) from None
        for tool, recorded in sorted(fixture.tool_schemas.items()):
            now = current.get(tool)
            if now != recorded:
                raise SchemaDrift(
                    f"{path}: tool {tool!r} schema hash is {now or 'absent'} now but "
                    f"{recorded} in the fixture; re-record it (--record)",
                    file=str(path), tool=tool, recorded=recorded, current=now,
                )
        found.setdefault(fixture.scenario, []).append(fixture)
    return found


class FixtureReplay:
    """Serves one fixture's answers: each recorded (tool, args) call matches once, in order."""

    def __init__(self, fixture: Fixture | None) -> None:
        self.queues: dict[str, deque[tuple[Any, str | None]]] = {}
        self.lock = threading.Lock()
        for call in fixture.calls if fixture else ():
            if not call.intercepted:
                key = _call_key(call.tool, call.args)
                self.queues.setdefault(key, deque()).append((call.result, call.error))

    def take(self, tool: str, args: dict[str, Any]) -> tuple[Any, str | None] | None:
        """The next recorded answer to exactly this call, or None (a miss)."""
        with self.lock:
            queue = self.queues.get(_call_key(tool, args))
            return queue.popleft() if queue else None


def replay_for(fixtures: dict[str, list[Fixture]], scenario: str, repeat: int) -> FixtureReplay:
    """The replay for one run: its own repeat's fixture, else one recorded for the scenario."""
    recorded = fixtures.get(scenario, [])
    for fixture in recorded:
        if fixture.repeat == repeat:
            return FixtureReplay(fixture)
    return FixtureReplay(recorded[repeat % len(recorded)] if recorded else None)


class ToolProxy:
    """The loopback HTTP server agents call instead of real tools.

    POST /runs/<run_id>/tools/<tool> with the arguments as a JSON object answers
    {"result": ...} or {"error": "..."}; GET /runs/<run_id>/tools lists the tools.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.runs: dict[str, RunContext] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="tool-proxy",
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        host, port = cast(tuple[str, int], self.server.server_address[:2])
        return f"http://{host}:{port}"

    def run_url(self, run_id: str) -> str:
        """The base URL one run's agent calls its tools under."""
        return f"{self.url}/runs/{run_id}"

    def attach(self, context: RunContext) -> None:
        """Start answering calls for `context.run_id`."""
        with self._lock:
            self.runs[context.run_id] = context

    def detach(self, run_id: str) -> None:
        """Stop answering calls for `run_id` (later calls get 404)."""
        with self._lock:
            self.runs.pop(run_id, None)

    def context(self, run_id: str) -> RunContext | None:
        """The run attached under `run_id`, if any."""
        with self._lock:
            return self.runs.get(run_id)

    def start(self) -> ToolProxy:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the socket."""
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join()
        self.server.server_close()

    def __enter__(self) -> ToolProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    owner: ToolProxy
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; without TCP_NODELAY the second waits
    # for the client's delayed ACK (~40 ms a call on Linux keep-alive connections).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the trace is the log."""

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[RunContext | None, list[str]]:
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if len(parts) < 3 or parts[0] != "runs" or parts[2] != "tools":
            return None, parts
        return self.owner.context(parts[1]), parts

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        """List the tools of the run's catalog."""
        context, parts = self._route()
        if context is None or len(parts) != 3:
            self._send(404, {"error": "no such run or path"})
            return
        tools = {name: {"description": spec.description, "parameters": spec.parameters,
                        "side_effecting": spec.side_effecting}
                 for name, spec in context.catalog.tools.items()}
        self._send(200, {"tools": tools})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        """Answer one tool call for one run."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            self._send(400, {"error": "bad Content-Length"})
            return
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, {"error": f"arguments over {MAX_BODY_BYTES} bytes"})
            return
        raw = self.rfile.read(length) if length > 0 else b""
        context, parts = self._route()
        if context is None or len(parts) != 4:
            self._send(404, {"error": "no such run or path"})
            return
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            refused = context.keep(CallRecord(parts[3], {}, error="arguments must be a JSON object"))
            self._send(200, {"error": refused.error})
            return
        answer: CallRecord = context.call(parts[3], args)
        if answer.error is not None:
            self._send(200, {"error": answer.error})
        else:
            self._send(200, {"result": answer.result})
