"""`rolegate mcp`: an MCP server over stdio, so a coding agent can watch and steer rollouts.

Built on the official MCP Python SDK (`pip install 'rolegate[mcp]'`). Each tool is
one call of the router's HTTP API under the caller's token (`--url`/`--token`,
ROLEGATE_URL/ROLEGATE_TOKEN, as every other command): the token's scopes decide
what the agent may do, and a refusal is the API's own (status, code, message
and details, as an MCP tool error), never a second set of rules kept here.

    status(role?)                      GET  /v1/bindings[/<role>]
    resolve(role, key?, attributes?)   GET  /v1/resolve/<role>
    gate(role)                         GET  /v1/roles/<role>/gate
    promote / pause / resume / approve POST /v1/bindings/<role>/<action>  {"reason"}
    rollback(role, reason, to_version?) POST /v1/bindings/<role>/rollback
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click
import requests

from rolegate.http import ApiClient, ApiError
from router.cli.common import EXIT_USAGE, token_option, url_option

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

INSTRUCTIONS = """rolegate: staged rollouts of AI agent configs.
A role serves its `current` config and, during a rollout, a `candidate` on part of the
jobs (stages shadow, canary, full, then stable or rolled_back). Read `status` and `gate`
before acting: the gate view's `next` section says what the gatekeeper would do and why.
Every action needs a reason, kept in the role's history; your token's scopes decide
which actions you may take, and the router's answer to a refused one is returned as is."""

#: How each state-changing tool is described to the agent.
ACTIONS = {
    "promote": "Advance the role's rollout one step (e.g. canary 10% -> 25%, or full -> stable). "
               "Refused while paused, or past a step that needs approval and has none.",
    "pause": "Stop the gatekeeper from moving the role (the current split keeps serving).",
    "resume": "Let the gatekeeper move the role again after a pause.",
    "approve": "Approve the step the role stands on, so it may advance past it.",
}


def _path(role: str) -> str:
    return quote(role, safe="")


def _failure(api_url: str, exc: Exception) -> Exception:
    """The MCP tool error for a failed API call: the API's own error, or the connection's."""
    from mcp.server.mcpserver.exceptions import ToolError

    if isinstance(exc, ApiError):
        error: dict[str, Any] = {"status": exc.status, "code": exc.code, "message": exc.message}
        if exc.details:
            error["details"] = exc.details
        return ToolError(f"{exc.status} {exc.code}: {exc.message}\n"
                         + json.dumps({"error": error}, sort_keys=True))
    return ToolError(f"cannot reach rolegate at {api_url}: {exc}")


def build_server(api: ApiClient) -> MCPServer:
    """The MCP server whose tools call the router through `api` (its token, its scopes)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("rolegate", instructions=INSTRUCTIONS)

    def call(method: str, path: str, body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            answer = api.get(path, params=params) if method == "GET" else api.post(path, body)
        except (ApiError, requests.RequestException) as exc:
            raise _failure(api.url, exc) from None
        return answer if isinstance(answer, dict) else {"answer": answer}

    @server.tool()
    def status(role: str | None = None) -> dict[str, Any]:
        """Where rollouts stand: every role's binding and version, or one role's with `role`."""
        if role:
            return call("GET", f"/v1/bindings/{_path(role)}")
        return call("GET", "/v1/bindings?view=full")

    @server.tool()
    def resolve(role: str, key: str | None = None,
                attributes: dict[str, str] | None = None) -> dict[str, Any]:
        """Which config serves `role` for job `key` (arm, config, body), as an agent would get it.

        `attributes` (tenant, region, ...) go through the role's targeting rules.
        Counted as an exposure like any resolve.
        """
        params = {f"attr.{name}": value for name, value in (attributes or {}).items()}
        if key:
            params["key"] = key
        return call("GET", f"/v1/resolve/{_path(role)}", params=params)

    @server.tool()
    def gate(role: str) -> dict[str, Any]:
        """The role's gate view: each arm's evidence and verdicts, and `next`, what comes next."""
        return call("GET", f"/v1/roles/{_path(role)}/gate")

    def action(name: str) -> Callable[[str, str], dict[str, Any]]:
        def act(role: str, reason: str) -> dict[str, Any]:
            return call("POST", f"/v1/bindings/{_path(role)}/{name}", {"reason": reason})
        act.__name__ = name
        act.__doc__ = ACTIONS[name]
        return act

    for name in ACTIONS:
        server.tool(name=name, description=ACTIONS[name])(action(name))

    @server.tool()
    def rollback(role: str, reason: str, to_version: int | None = None) -> dict[str, Any]:
        """Roll the role back: the candidate stops serving at once. With `to_version`, restore
        that earlier version of the binding (as a new version) instead."""
        body: dict[str, Any] = {"reason": reason}
        if to_version is not None:
            body["to_version"] = to_version
        return call("POST", f"/v1/bindings/{_path(role)}/rollback", body)

    return server


def register(main: click.Group) -> None:
    """Add `rolegate mcp` to the command line."""

    @main.command("mcp")
    @url_option()
    @token_option()
    def mcp_command(url: str, token: str | None) -> None:
        """Serve rolegate's tools to a coding agent over MCP (stdio), under your token.

        Point the agent's MCP configuration at `rolegate mcp` with ROLEGATE_URL and
        ROLEGATE_TOKEN in its environment. Needs the `mcp` extra:
        pip install 'rolegate[mcp]'.
        """
        try:
            import mcp  # noqa: F401 - only to say what is missing
        except ImportError:
            click.echo("error: rolegate mcp needs the MCP SDK: pip install 'rolegate[mcp]'",
                       err=True)
            sys.exit(EXIT_USAGE)
        api = ApiClient(url, token)
        try:
            build_server(api).run("stdio")
        finally:
            api.close()
