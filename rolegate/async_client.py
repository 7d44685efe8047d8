"""The client for asyncio code: constructing it never waits on the network.

    client = await AsyncClient.create("http://127.0.0.1:8080", token, stamps=STAMPS)
    resolution = client.resolve("summarizer", job_id)      # in memory: no await
    ...
    await client.aclose()

`resolve`, `allowed`, `report` and `recorder` are the sync client's own: they
never touch the network, so they are safe on the event loop. What waits
(`ready`, `flush`, `aclose`) is awaited on a worker thread. The first snapshot
is fetched in the background; until it arrives `resolve` answers from a
bootstrap or the saved `snapshot_path`, or raises `SnapshotUnavailable`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from rolegate.client import Client
from rolegate.client_config import ClientConfig
from rolegate.errors import SnapshotUnavailable


class AsyncClient(Client):
    """`Client` for asyncio: construction never blocks; waiting methods are awaitable."""

    def __init__(self, url: str | None = None, token: str | None = None, **options: Any) -> None:
        """Start the client without waiting for its first snapshot (`start_timeout` is 0).

        `config=ClientConfig(...)` as for `Client`; its `start_timeout` is left unset or 0.
        """
        config: ClientConfig | None = options.get("config")
        if options.get("start_timeout") or (config is not None and config.start_timeout):
            raise ValueError("AsyncClient never waits in its constructor; await ready() instead")
        if config is not None:
            options["config"] = dataclasses.replace(config, start_timeout=0)
        else:
            options["start_timeout"] = 0
        super().__init__(url, token, **options)

    @classmethod
    async def create(cls, url: str | None = None, token: str | None = None, *,
                     ready_timeout: float | None = 5.0, **options: Any) -> AsyncClient:
        """Construct, then await the first snapshot for up to `ready_timeout` seconds.

        Raises SnapshotUnavailable when none came (and no bootstrap or saved
        snapshot gave one); the client is closed then.
        """
        client = cls(url, token, **options)
        if not await client.ready(ready_timeout):
            await client.aclose(0)
            raise SnapshotUnavailable(
                f"the router at {client.url} did not answer within {ready_timeout}s "
                f"({client.last_error}) and no bootstrap snapshot was given", url=client.url)
        return client

    async def ready(self, timeout: float | None = None) -> bool:
        """Await the first refresh; True when a snapshot is in use."""
        return await asyncio.to_thread(self.wait_ready, timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Await until every queued trace was sent (or refused); False on timeout."""
        return await asyncio.to_thread(self.flush, timeout)

    async def aclose(self, timeout: float | None = None) -> None:
        """Flush and stop, off the event loop; returns within `timeout` (default flush_timeout)."""
        await asyncio.to_thread(self.close, timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
