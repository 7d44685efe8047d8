"""Config bodies on demand: fetched the first time a resolve needs one, kept by config version.

A client reads the binding table with `?bodies=versions`: each config with a
body is named with the config version whose body it is (`body_versions`), not
carried whole. A role whose answers carry a body this client has not fetched
yet waits in the snapshot's `pending`; the first resolve of it fetches the
bodies (`GET /v1/configs/<config>/versions/<n>`, a record that never changes),
puts them on the role's answers and moves the role to what resolving reads
without a lock, so every later resolve of it costs nothing more. A body is
kept by (config, version): a new snapshot naming the same version takes the
kept body (a refresh or a watch refetches nothing unchanged); a changed body is
a new version, fetched when it is first needed, and the old one is dropped.

When the router cannot give a body at that moment (after the client's retries
on connection errors), the resolve raises `BodyUnavailable`: an answer never
goes out without the body its config has, nor with another version's. A saved
snapshot keeps the bodies fetched so far, so a restart from it serves them.

The figure this buys (tests/test_client_view.py, bench/peers.py): a client of a
thousand roles holds a version number per config, not a thousand bodies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from rolegate.body import lacking
from rolegate.errors import BodyUnavailable
from rolegate.http import ApiClient, ApiError

if TYPE_CHECKING:
    from rolegate.snapshot import Fast, Snapshot

#: Where the record of one config version is read (its `body` is the body at that version).
VERSION_PATH = "/v1/configs/{config}/versions/{version}"


class BodyCache:
    """The bodies a client fetched, by (config, version), and the fetching itself."""

    def __init__(self, api: Callable[[], ApiClient], url: str) -> None:
        """`api` makes the HTTP client bodies are fetched with (its retries are the policy)."""
        self._make_api = api
        self._api: ApiClient | None = None
        self.url = url
        self._lock = threading.Lock()
        self._kept: dict[tuple[str, int], dict[str, Any]] = {}

    def install(self, snapshot: Snapshot) -> None:
        """Give a new snapshot the kept bodies of the versions it names; keep only those."""
        versions = snapshot.body_versions
        if not versions:
            return
        with self._lock:
            kept = self._kept
            for config, version in versions.items():
                if config in snapshot.bodies:  # a saved snapshot's: fetched before
                    kept[(config, version)] = snapshot.bodies[config]
            self._kept = {pair: kept[pair] for pair in versions.items() if pair in kept}
            snapshot.supply({config: body for (config, _), body in self._kept.items()
                             if config not in snapshot.bodies})

    def complete(self, snapshot: Snapshot, role: str) -> Fast:
        """The role's entry with every body its answers carry, fetched now if need be."""
        with self._lock:  # one fetch of a body however many threads ask for it
            fast = snapshot.entries.get(role)
            if fast is not None:
                return fast
            wanted = lacking(snapshot.pending[role], snapshot.bodies, snapshot.body_versions)
            snapshot.supply(self._fetch_all(wanted))
            return snapshot.entries[role]

    def stamps(self, snapshot: Snapshot, config: str) -> dict[str, str] | None:
        """The stamps the config's body decides (`Snapshot.body_stamps`), fetching it if need be."""
        version = snapshot.body_versions.get(config)
        if version is not None and config not in snapshot.bodies:
            with self._lock:
                if config not in snapshot.bodies:
                    snapshot.supply(self._fetch_all({config: version}))
        return snapshot.body_stamps.get(config)

    def after_fork(self) -> None:
        """In a forked child: a session and a lock of its own (the kept bodies stay)."""
        self._api = None
        self._lock = threading.Lock()

    def _fetch_all(self, wanted: Mapping[str, int]) -> dict[str, dict[str, Any]]:
        found = {}
        for config, version in wanted.items():
            body = self._kept.get((config, version))
            if body is None:
                body = self._kept[(config, version)] = self._fetch(config, version)
            found[config] = body
        return found

    def _fetch(self, config: str, version: int) -> dict[str, Any]:
        if self._api is None:
            self._api = self._make_api()
        path = VERSION_PATH.format(config=quote(config, safe=""), version=version)
        try:
            record = self._api.request("GET", path, ok=(200,)).json()
        except (ApiError, requests.RequestException, ValueError) as exc:
            raise BodyUnavailable(
                f"config {config!r}: its body (version {version}) could not be fetched from "
                f"the router at {self.url}: {exc}; the resolution is not answered without it",
                config=config, version=version, url=self.url) from exc
        body = record.get("body") if isinstance(record, dict) else None
        if not isinstance(body, dict):
            raise BodyUnavailable(f"config {config!r} has no body at version {version}",
                                  config=config, version=version, url=self.url)
        return body
