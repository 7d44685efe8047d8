"""`rolegate mcp` over stdio, driven by the official MCP client, against a real router.

The server is the real command in a subprocess (ROLEGATE_URL / ROLEGATE_TOKEN in its
environment, as an agent's MCP configuration gives them); the router is the real
app on loopback with a real Redis. Scopes and refusals are the API's.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import requests
from flask import Flask
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import base_env, werkzeug_server

pytestmark = pytest.mark.slow

ROLE = "support"
TOOLS = {"status", "resolve", "gate", "promote", "rollback", "pause", "resume", "approve"}


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router on loopback; role support on a 10% canary with steps 0.1, 0.5, 1."""
    with werkzeug_server(app) as base:
        r = requests.put(f"{base}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1, "steps": [0.1, 0.5, 1.0]})
        assert r.status_code == 201, r.text
        yield base


def with_mcp(url: str, token: str, body: Callable[[Client], Awaitable[Any]]) -> Any:
    """Start `rolegate mcp` under `token`, connect the MCP client over stdio, run `body`."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "router.cli", "mcp"],
        env=base_env(ROLEGATE_URL=url, ROLEGATE_TOKEN=token))

    async def run() -> Any:
        async with Client(params, read_timeout_seconds=30) as client:
            return await body(client)

    return asyncio.run(run())


def answer(result: Any) -> dict[str, Any]:
    """A successful tool result's JSON."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


def error_text(result: Any) -> str:
    """A failed tool result's message."""
    assert result.is_error, result
    return str(result.content[0].text)


def test_an_operator_watches_and_steers_a_rollout(url: str) -> None:
    """Every tool listed; status, resolve and the gate read; pause holds; promote, rollback act."""

    async def session(client: Client) -> dict[str, Any]:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        seen: dict[str, Any] = {"tools": listed}
        seen["status"] = answer(await client.call_tool("status", {"role": ROLE}))
        seen["all"] = answer(await client.call_tool("status", {}))
        seen["resolve"] = answer(await client.call_tool("resolve", {"role": ROLE,
                                                                    "key": "job-1"}))
        seen["gate"] = answer(await client.call_tool("gate", {"role": ROLE}))
        answer(await client.call_tool("pause", {"role": ROLE, "reason": "look first"}))
        seen["held"] = error_text(await client.call_tool("promote", {"role": ROLE,
                                                                     "reason": "go"}))
        answer(await client.call_tool("resume", {"role": ROLE, "reason": "looked"}))
        seen["promoted"] = answer(await client.call_tool("promote", {"role": ROLE,
                                                                     "reason": "healthy"}))
        seen["rolled"] = answer(await client.call_tool("rollback", {"role": ROLE,
                                                                    "reason": "bad tone"}))
        seen["unknown"] = error_text(await client.call_tool("gate", {"role": "nope"}))
        return seen

    seen = with_mcp(url, OPERATOR, session)
    assert seen["tools"] == TOOLS
    assert seen["status"]["binding"]["stage"] == "canary" and ROLE in seen["all"]["roles"]
    assert seen["resolve"]["role"] == ROLE and seen["resolve"]["config"] in ("cfg_a", "cfg_b")
    assert "next" in seen["gate"]
    # The router's own refusal, its status, code and message: the role is paused.
    assert "409 illegal_transition: the role is paused" in seen["held"]
    assert seen["promoted"]["binding"]["share"] == 0.5
    assert seen["rolled"]["binding"]["stage"] == "rolled_back"
    assert "404 " in seen["unknown"] and "nope" in seen["unknown"]
    history = requests.get(f"{url}/v1/bindings/{ROLE}/history", headers=auth(OPERATOR),
                           timeout=5).json()["entries"]
    assert [e["reason"] for e in history[:2]] == ["bad tone", "healthy"]


def test_a_caller_token_reads_but_may_not_move_a_rollout(url: str) -> None:
    """Under a caller token resolve works and promote is the API's 403: nothing moves."""

    async def session(client: Client) -> tuple[dict[str, Any], str]:
        resolved = answer(await client.call_tool("resolve", {"role": ROLE}))
        refused = error_text(await client.call_tool("promote", {"role": ROLE,
                                                                "reason": "sneak"}))
        return resolved, refused

    resolved, refused = with_mcp(url, CALLER, session)
    assert resolved["role"] == ROLE
    assert "403 forbidden: a caller token may not call this" in refused
    binding = requests.get(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR),
                           timeout=5).json()["binding"]
    assert binding["share"] == 0.1 and binding["stage"] == "canary"
