"""rolegate's caller SDK: what an agent imports to resolve its config and report its runs.

    from rolegate import Client

    client = Client("http://127.0.0.1:8080", token, stamps=STAMPS)
    with client.recorder(client.resolve("summarizer", job_id)) as run:
        run.output(my_agent(run.config, on_tool=run.tool))

It imports nothing of the service (`router`, `bindings`, `gatekeeper`) nor
Flask, gunicorn or redis-py, so it imports cleanly beside an application's own
`router.py`. The service imports the shared pieces from here: the bucketing
function (`rolegate.routing`), the trace schema (`rolegate.trace`), config
bodies (`rolegate.body`) and the HTTP client with its retries (`rolegate.http`).
Every option may also be given as one value, `Client(config=ClientConfig(url, token,
...))`. In asyncio code use `AsyncClient` (`await AsyncClient.create(...)`): it never
blocks the event loop.
"""

from __future__ import annotations

from rolegate.async_client import AsyncClient
from rolegate.client import Client
from rolegate.client_config import ClientConfig
from rolegate.errors import (
    InvalidToken,
    NotFound,
    RolegateError,
    SnapshotTooOld,
    SnapshotUnavailable,
)
from rolegate.recorder import Recorder
from rolegate.report_stats import ReportStats
from rolegate.routing import Resolution, Stage
from rolegate.trace import RunError, Stamps, Step, Trace

__all__ = ["AsyncClient", "Client", "ClientConfig", "InvalidToken", "NotFound", "Recorder", "ReportStats", "Resolution",
           "RolegateError", "RunError", "SnapshotTooOld", "SnapshotUnavailable", "Stage",
           "Stamps", "Step", "Trace"]
