"""A live router with a canaried role and a real rolegate Client, for the integration tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from flask import Flask

from rolegate import Client
from rolegate.routing import bucket
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

ROLE = "support"
#: The role's gate forbids delete_account; its canary sends half the keys to cfg_b.
GATE = {"thresholds": {"min_samples": 5}, "invariants": {"forbidden_tools": ["delete_account"]}}
#: The rollout's salt, named so candidate_key() knows which keys the canary takes.
SALT = "agents"


@contextmanager
def live_client(app: Flask, share: float = 0.5) -> Iterator[tuple[str, Client]]:
    """The router over real HTTP with role support (cfg_a, candidate cfg_b on a canary)."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE,
                               "salt": SALT})
        assert r.status_code == 201, r.text
        r = requests.post(f"{url}/v1/bindings/{ROLE}/canary", headers=auth(OPERATOR),
                          json={"share": share, "reason": "canary"}, timeout=5)
        assert r.status_code == 200, r.text
        client = Client(url, CALLER, refresh_interval=0.1)
        try:
            yield url, client
        finally:
            client.close()


def candidate_key(prefix: str = "job") -> str:
    """A job key that the 50% canary sends to the candidate."""
    return next(f"{prefix}-{n}" for n in range(1000)
                if bucket(ROLE, f"{prefix}-{n}", salt=SALT, version=2) < 0.5)


def binding_stage(url: str) -> str:
    """The role's stage as the router holds it."""
    body = requests.get(f"{url}/v1/bindings/{ROLE}", headers=auth(CALLER), timeout=5).json()
    return str(body["binding"]["stage"])


@contextmanager
def own_event_loop() -> Iterator[None]:
    """A fresh default event loop for one test, closed after it.

    pydantic-ai's and the Agents SDK's run_sync both drive the thread's default
    loop, and the SDK shuts that loop's async generators down: a later run of the
    other framework on the same loop warns. Each test gets its own loop instead.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
