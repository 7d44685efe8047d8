"""The client's refresh thread: keeps the bindings snapshot fresh, in the background.

The `/v1/bindings/watch` long-poll with `subscribe` (the client's default), or a
conditional `GET /v1/bindings` every `refresh_interval` seconds (an unchanged
table costs a 304); a router without the watch is polled. The
first fetch is the thread's first act, so constructing a client never has to
wait for it (`wait_ready`). A failure keeps the last snapshot and marks it stale;
a 429 holds the next request for its Retry-After. Each new snapshot is saved to
`snapshot_path` when one is set.

A mixin of `rolegate.client.Client`, which owns the attributes declared below.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path

import requests
from pydantic import ValidationError

from rolegate.body_cache import BodyCache
from rolegate.exposures import Exposures
from rolegate.http import ApiClient, ApiError
from rolegate.snapshot import Fast, Snapshot

log = logging.getLogger("rolegate.client")

BINDINGS_PATH = "/v1/bindings"
WATCH_PATH = "/v1/bindings/watch"
#: The table as the client holds it: each config body named by its version, fetched the
#: first time it is needed (`rolegate.body_cache`); an older router sends them inline.
TABLE_PARAMS = {"bodies": "versions"}
#: Upper bound the router puts on one watch (router/api/watch.py MAX_TIMEOUT_S).
MAX_WATCH_TIMEOUT = 25.0
#: Pause before a failed watch is tried again.
WATCH_RETRY_S = 0.5

_monotonic = time.monotonic
_FETCH_ERRORS = (ApiError, requests.RequestException, ValueError, ValidationError)


class SnapshotRefresher:
    """Fetches and installs snapshots on a daemon thread; tracks staleness."""

    url: str
    refresh_interval: float
    subscribe: bool
    watch_timeout: float
    snapshot_path: Path | None
    last_error: str | None
    _api: ApiClient
    _etag: str | None
    _snapshot: Snapshot | None
    _fast: dict[str, Fast]
    _bodies: BodyCache
    _exposures: Exposures
    _confirmed: float
    _deadline: float
    _max_age: float | None
    _stale: bool
    _hold_until: float
    _stop: threading.Event
    _ready: threading.Event
    _thread: threading.Thread

    def _start_refreshing(self) -> None:
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rolegate-client-refresh",
                                        daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for the first refresh to finish; True when a snapshot is in use."""
        self._ready.wait(timeout)
        return self._snapshot is not None

    # -- refreshing ----------------------------------------------------------

    def refresh(self) -> bool:
        """Fetch the table once (conditionally); True when the router confirmed it."""
        headers = {"If-None-Match": self._etag} if self._etag else {}
        try:
            response = self._api.request("GET", BINDINGS_PATH, ok=(200, 304), headers=headers,
                                         params=TABLE_PARAMS)
            self._take(response)
        except _FETCH_ERRORS as exc:
            self._failed(exc)
            return False
        return True

    def _hold(self, exc: Exception) -> None:
        """After a 429, wait what the router asked (Retry-After) before the next request."""
        if isinstance(exc, ApiError) and exc.status == 429:
            wait = exc.retry_after if exc.retry_after is not None else self.refresh_interval
            self._hold_until = _monotonic() + wait

    def _watch_once(self) -> None:
        params = {**TABLE_PARAMS, "timeout": f"{self.watch_timeout:g}"}
        if self._snapshot is not None:
            params["generation"] = str(self._snapshot.generation)
        try:
            response = self._api.request("GET", WATCH_PATH, ok=(200, 304), params=params,
                                         timeout=self.watch_timeout + self._api.timeout)
            self._take(response)
        except ApiError as exc:
            if exc.status == 404:
                log.warning("the router has no %s; polling instead", WATCH_PATH)
                self.subscribe = False
            self._failed(exc)
            self._stop.wait(min(self.refresh_interval, WATCH_RETRY_S))
        except _FETCH_ERRORS as exc:
            self._failed(exc)
            # A subscriber promised sub-second changes: retry soon, whatever the interval.
            self._stop.wait(min(self.refresh_interval, WATCH_RETRY_S))

    def _take(self, response: requests.Response) -> None:
        if response.status_code == 200:
            snapshot = Snapshot.from_json(response.json())
            self._install(snapshot, confirmed=True)
            self._etag = response.headers.get("ETag") or f'"g{snapshot.generation}"'
            if self.snapshot_path is not None:
                try:
                    snapshot.save(self.snapshot_path)
                except OSError as exc:
                    log.warning("could not save the snapshot to %s: %s", self.snapshot_path, exc)
        else:
            self._confirm()

    def _install(self, snapshot: Snapshot, *, confirmed: bool) -> None:
        # Entries first, then the confirmation: a reader never pairs a fresh
        # timestamp with the previous table.
        # Counting into this client's exposures before any resolve reads the snapshot.
        self._bodies.install(snapshot)  # the bodies already fetched, by version
        snapshot.count_with(self._exposures)
        self._snapshot = snapshot
        self._fast = snapshot.entries
        if confirmed:
            self._confirm()

    def _confirm(self) -> None:
        self._confirmed = confirmed = _monotonic()
        # Resolving compares the clock with this one number (Client.max_age).
        max_age = self._max_age
        self._deadline = confirmed + (math.inf if max_age is None else max_age)
        if self._stale and self.last_error is not None:
            log.info("router at %s answers again", self.url)
        self._stale = False
        self.last_error = None

    def _failed(self, exc: Exception) -> None:
        if self.last_error is None and self._snapshot is not None:
            log.warning("router at %s unreachable, answering from the last snapshot: %s",
                        self.url, exc)
        self.last_error = str(exc) or type(exc).__name__
        self._stale = True
        self._hold(exc)

    def _run(self) -> None:
        api, stop = self._api, self._stop
        try:
            self.refresh()
            self._ready.set()
            while not stop.is_set():
                held = self._hold_until - _monotonic()
                if held > 0:
                    stop.wait(held)
                elif self.subscribe:
                    self._watch_once()
                elif not stop.wait(self.refresh_interval):
                    self.refresh()
        finally:
            self._ready.set()
            api.close()
