"""Eval-mode isolation: what one run's tool calls are allowed to do.

In eval mode a side-effecting tool is never executed: the run gets a synthesized
result so it can go on, and the intercepted call is kept in the trace. Agents see
placeholder credentials instead of real ones, and workspace tools keep every
write inside the run's own directory. In live mode (only for recording against
the real tools) calls go through.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import requests

from gatekeeper.suite.scenario import ToolCatalog, ToolSpec
from gatekeeper.suite.workspace import Workspace, WorkspaceEscape
from rolegate.http import ApiClient, ApiError
from rolegate.trace import Step

PLACEHOLDER_PREFIX = "rolegate-placeholder-"
#: JSON-schema type names -> the Python types a decoded JSON value may have.
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "object": (dict,), "array": (list,), "null": (type(None),),
}


def placeholder_credential(name: str) -> str:
    """The deterministic stand-in for credential `name` in eval mode."""
    return PLACEHOLDER_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:12]


def agent_credentials(catalog: ToolCatalog, eval_mode: bool,
                      environ: Mapping[str, str]) -> dict[str, str]:
    """The credentials an agent run receives: placeholders in eval mode, real ones live."""
    if eval_mode:
        return {name: placeholder_credential(name) for name in catalog.credentials}
    return {name: environ.get(var, "") for name, var in catalog.credentials.items()}


class ReplaySource(Protocol):
    """Recorded answers a run's calls are served from (see `replay.FixtureReplay`)."""

    def take(self, tool: str, args: dict[str, Any]) -> tuple[Any, str | None] | None:
        """The recorded (result, error) for this call, consumed; None when nothing matches."""


@dataclass
class CallRecord:
    """One tool call as the proxy saw and answered it."""

    tool: str
    args: dict[str, Any]
    result: Any = None
    error: str | None = None
    intercepted: bool = False

    def step(self) -> Step:
        """The call as a trace step; an intercepted call says so in its result."""
        result = {"intercepted": True, "result": self.result} if self.intercepted else self.result
        return Step(tool=self.tool, args=self.args, error=self.error, result=result)


def check_arguments(spec: ToolSpec, args: dict[str, Any]) -> str | None:
    """Why `args` do not fit the tool's parameters, or None when they do."""
    params = spec.parameters
    properties = params.get("properties", {})
    for name in params.get("required", []):
        if name not in args:
            return f"missing required argument {name!r}"
    if params.get("additionalProperties") is False:
        unknown = sorted(set(args) - set(properties))
        if unknown:
            return f"unknown arguments {unknown}"
    for name, value in args.items():
        wanted = properties.get(name, {}).get("type")
        types = _JSON_TYPES.get(wanted) if isinstance(wanted, str) else None
        # bool is an int in Python, but not in JSON schema.
        if types and (not isinstance(value, types) or
                      (isinstance(value, bool) and bool not in types)):
            return f"argument {name!r} must be {wanted}"
    return None


@dataclass
class RunContext:
    """Everything the proxy needs to answer one run's calls, and what it saw."""

    run_id: str
    workspace: Workspace
    catalog: ToolCatalog
    eval_mode: bool = True
    replay: ReplaySource | None = None
    credentials: dict[str, str] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)
    replay_misses: list[str] = field(default_factory=list)
    _clients: dict[str, ApiClient] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, tool: str, args: dict[str, Any]) -> CallRecord:
        """Answer one call (never raising for the agent's mistakes) and keep its record."""
        return self.keep(self._answer(tool, args))

    def keep(self, record: CallRecord) -> CallRecord:
        """Add a call to the run's record (also for calls refused before dispatch)."""
        with self._lock:
            self.calls.append(record)
        return record

    def _answer(self, tool: str, args: dict[str, Any]) -> CallRecord:
        spec = self.catalog.tools.get(tool)
        if spec is None:
            return CallRecord(tool, args, error=f"unknown tool {tool!r}")
        problem = check_arguments(spec, args)
        if problem is not None:
            return CallRecord(tool, args, error=problem)
        if spec.side_effecting and self.eval_mode:
            return CallRecord(tool, args, result=spec.synthesized, intercepted=True)
        if spec.kind == "workspace":
            return self._workspace_call(tool, args)
        if self.replay is not None:
            recorded = self.replay.take(tool, args)
            if recorded is None:
                with self._lock:
                    self.replay_misses.append(tool)
                return CallRecord(tool, args, error=f"replay miss: no recorded call of {tool!r} "
                                                    "with these arguments")
            return CallRecord(tool, args, result=recorded[0], error=recorded[1])
        if spec.kind == "http":
            return self._http_call(tool, spec, args)
        return CallRecord(tool, args, result=spec.result)

    def _workspace_call(self, tool: str, args: dict[str, Any]) -> CallRecord:
        ws = self.workspace
        try:
            if tool == "read_file":
                return CallRecord(tool, args, result={"content": ws.read_text(str(args["path"]))})
            if tool == "write_file":
                target = ws.resolve(str(args["path"]))
                target.parent.mkdir(parents=True, exist_ok=True)
                content = str(args.get("content", ""))
                target.write_text(content, encoding="utf-8")
                return CallRecord(tool, args, result={"written": len(content)})
            if tool == "list_files":
                return CallRecord(tool, args, result={"files": ws.files()})
        except (WorkspaceEscape, KeyError) as exc:
            return CallRecord(tool, args, error=f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            return CallRecord(tool, args, error=f"{exc.strerror or exc}")
        return CallRecord(tool, args, error=f"no workspace tool named {tool!r}")

    def _http_call(self, tool: str, spec: ToolSpec, args: dict[str, Any]) -> CallRecord:
        if not spec.url:
            return CallRecord(tool, args, error=f"tool {tool!r} has no url")
        token = self.credentials.get(spec.credential) if spec.credential else None
        key = f"{spec.url}\0{token}"
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                # One attempt: a tool call may not be idempotent, so never retry it blindly.
                client = self._clients[key] = ApiClient(spec.url, token, timeout=30.0,
                                                        attempts=1)
        try:
            response = client.request("POST", "", json=args, ok=(200,))
        except ApiError as exc:
            return CallRecord(tool, args, error=f"{exc.status} {exc.message}")
        except requests.RequestException as exc:
            return CallRecord(tool, args, error=f"tool unreachable: {type(exc).__name__}")
        try:
            return CallRecord(tool, args, result=response.json())
        except ValueError:
            return CallRecord(tool, args, result=response.text)

    def close(self) -> None:
        """Close the HTTP clients opened for live tools."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
