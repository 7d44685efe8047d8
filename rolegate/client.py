"""The caller client: resolve in-process from a refreshed snapshot, report traces in the background.

Adoption is three lines (see docs/client.md)::

    client = Client("http://rolegate:8000", token, stamps=STAMPS)
    with client.recorder(client.resolve("summarizer", job_id)) as run:
        run.output(my_agent(run.config, on_tool=run.tool))

Resolving never touches the network: it reads the last snapshot of
`GET /v1/bindings`, which a daemon thread (`rolegate.refresher`) keeps fresh
with the `/v1/bindings/watch` long-poll, so a rollback arrives in milliseconds
(by default: polling every 2 s let 13 to 64 jobs run a config after its
rollback was written), or, with `subscribe=False`, with a conditional GET every
`refresh_interval` (an unchanged table costs a 304). The arm
is decided by `rolegate.routing`'s bucketing, the server's own functions (each
role's version, salt and unit: docs/bucketing.md), so every answer equals the
server's. When the router cannot be reached the last
snapshot keeps answering with `stale=True` (fail-static); once it is older than
`max_age` seconds resolving raises `SnapshotTooOld` instead.

Construction waits for the first snapshot at most `start_timeout` seconds (0:
never; `AsyncClient` never does), and starts from a bootstrap or the last good
snapshot on disk (`snapshot_path`) when it has one. After `os.fork()` the child
restarts its own threads and connections, and says `stale` until the router
answers it. `allowed(resolution, tool)` applies the role's tool rules before a
tool runs.

This module must not import Flask: callers install rolegate for the client only.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xxhash import xxh3_64_intdigest as _xxh3

from rolegate.body_cache import BodyCache
from rolegate.client_config import OPTIONS, ClientConfig, config_of
from rolegate.errors import NotFound, RolegateError, SnapshotTooOld, SnapshotUnavailable
from rolegate.exposures import EXPOSURES_PATH, Exposures, Sender
from rolegate.http import ApiClient
from rolegate.masking import mask_trace
from rolegate.recorder import Recorder
from rolegate.refresher import MAX_WATCH_TIMEOUT, SnapshotRefresher
from rolegate.report_stats import ReportStats
from rolegate.reporter import TraceReporter
from rolegate.routing import Resolution, new_key
from rolegate.run_ids import with_run_slots
from rolegate.snapshot import Fast, Snapshot, starting_snapshot
from rolegate.trace import Stamps, Trace

__all__ = ["Client", "ClientConfig", "SnapshotTooOld", "SnapshotUnavailable"]

log = logging.getLogger("rolegate.client")

#: The server refuses longer job keys (router/api/resolve.py); so does the client.
MAX_KEY_LENGTH = 500
#: Longest close() waits for a refresh thread stuck in a watch (it ends by itself).
REFRESH_JOIN_S = 1.0

_monotonic = time.monotonic


class Client(SnapshotRefresher):
    """Resolve roles in-process and report traces without blocking the agent."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        config: ClientConfig | None = None,
        refresh_interval: float = 2.0,
        max_age: float | None = 300.0,
        bootstrap: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        subscribe: bool = True,
        watch_timeout: float = 20.0,
        timeout: float = 5.0,
        stamps: Stamps | Mapping[str, Any] | None = None,
        agent_version: str | None = None,
        max_queue: int = 10_000,
        batch_size: int = 200,
        flush_timeout: float = 10.0,
        report_attempts: int = 5,
        max_batch_bytes: int = 1024 * 1024,
        start_timeout: float | None = None,
        snapshot_path: str | os.PathLike[str] | None = None,
        linger: float = 0.1,
        mask: Callable[[Any], Any] | None = None,
    ) -> None:
        """Start refreshing the snapshot in the background; wait for it up to `start_timeout`.

        `start_timeout` defaults to `timeout`; with a wait, SnapshotUnavailable
        is raised when no snapshot came (the router did not answer and neither
        `bootstrap` nor `snapshot_path` gave one). With 0 construction never
        waits, and `resolve` raises SnapshotUnavailable until a snapshot is in.
        `snapshot_path` (opt-in) is where each new snapshot is saved and where
        a restarted client starts from. `max_age=None` never refuses an old one.
        `linger` is how long a batch of traces waits for more to join it before
        it is sent (`flush()` and `close()` send at once). `subscribe` (the
        default) holds one watch open to the router; False polls every
        `refresh_interval` instead (docs/client.md says what each costs).
        `mask(value) -> value` is applied to every reported trace's input, output,
        tool arguments and results before it is queued (`rolegate.masking`); a
        raising mask sends "<masking failed>" in place of the value.

        `config=ClientConfig(url, token, ...)` gives all of these as one value instead
        (`rolegate.client_config`); then no other argument is given.
        """
        options = {name: value for name, value in locals().items() if name in OPTIONS}
        #: The options this client runs with, whichever form they were given in.
        self.config = cfg = config_of(config, url, token, options)
        self._start(cfg)

    def _start(self, cfg: ClientConfig) -> None:
        url, token, timeout, max_age = cfg.url, cfg.token, cfg.timeout, cfg.max_age
        flush_timeout = cfg.flush_timeout
        self.url = url.rstrip("/")
        self.refresh_interval = cfg.refresh_interval
        self._max_age = max_age
        self.subscribe = cfg.subscribe
        self.watch_timeout = max(0.5, min(cfg.watch_timeout, MAX_WATCH_TIMEOUT))
        if max_age is not None:
            # A quiet watch is what confirms the snapshot: keep it well inside max_age.
            self.watch_timeout = max(0.5, min(self.watch_timeout, max_age / 3))
        stamps = cfg.stamps
        self.stamps = Stamps.model_validate(stamps) if isinstance(stamps, Mapping) else stamps
        #: Stamps a run with, beside what its config's body decides (see recorder()).
        self.agent_version = cfg.agent_version or (self.stamps.agent_version if self.stamps else None)
        self.last_error: str | None = None
        self._stale = True
        self._confirmed = _monotonic()
        self._deadline = self._confirmed + (math.inf if max_age is None else max_age)
        self._snapshot: Snapshot | None = None
        self._fast: dict[str, Fast] = {}
        self._etag: str | None = None
        self._hold_until = 0.0
        self._closed = False
        self.flush_timeout = flush_timeout
        self.mask = cfg.mask
        self.snapshot_path = Path(cfg.snapshot_path) if cfg.snapshot_path is not None else None
        # The refresh thread owns this session (requests sessions are not shared
        # across threads); one attempt per call, since the loop is the retry.
        self._refresh_api = functools.partial(ApiClient, url, token, timeout=timeout, attempts=1)
        self._api = self._refresh_api()
        #: Every in-process assignment, counted per (role, config, arm, stage epoch)
        #: and sent on its own thread (the router cannot see these resolves).
        self._exposures = Exposures()
        self._run_stem = self._exposures.run_stem
        #: Config bodies fetched the first time a resolve needs one (retried on connection
        #: errors, within the client's timeout).
        self._bodies = BodyCache(functools.partial(
            ApiClient, url, token, timeout=timeout, attempts=cfg.report_attempts,
            max_delay=timeout), self.url)
        starting = starting_snapshot(cfg.bootstrap, self.snapshot_path)
        if starting is not None:
            self._install(starting, confirmed=False)
        self._reporter = TraceReporter(
            functools.partial(ApiClient, url, token, timeout=timeout,
                              attempts=cfg.report_attempts, max_delay=min(10.0, flush_timeout)),
            max_queue=cfg.max_queue, batch_size=cfg.batch_size,
            max_batch_bytes=cfg.max_batch_bytes, flush_timeout=flush_timeout, linger=cfg.linger)
        # An agent that exits without close() still gets its traces sent: atexit
        # runs while daemon threads are alive (bounded by flush_timeout).
        atexit.register(self._reporter.close)
        self._exposure_api = self._refresh_api()
        self._sender = Sender(self._exposures, self._post_exposures, time.time)
        atexit.register(self._sender.close)
        self._start_refreshing()
        # Threads do not survive a fork: the child starts its own (a weak reference,
        # so the hook, which cannot be unregistered, never keeps a client alive).
        os.register_at_fork(after_in_child=functools.partial(_restart_in_child,
                                                             weakref.ref(self)))
        wait = timeout if cfg.start_timeout is None else cfg.start_timeout
        if wait > 0 and not self.wait_ready(wait):
            self.close(timeout=0)
            raise SnapshotUnavailable(
                f"the router at {self.url} did not answer within {wait:g}s "
                f"({self.last_error}) and no bootstrap snapshot was given", url=self.url)

    # -- resolving -----------------------------------------------------------

    def resolve(self, role: str, key: str | None = None,
                attributes: Mapping[str, str] | None = None) -> Resolution:
        """Which config serves `role` for job `key` (a fresh key when None): the server's answer.

        `attributes` (tenant, region, ...) go through the role's targeting rules first,
        by the same `rolegate.routing.resolve` the router runs for `?attr.<name>=`.

        Raises NotFound for an unknown role and SnapshotTooOld when the router has
        not confirmed the snapshot for more than `max_age` seconds.
        """
        # The hot path: no lock, no network; every attribute read is of an
        # object the refresh thread replaces whole, never mutates.
        if _monotonic() > self._deadline:
            raise self._too_old()
        try:
            fast: Any = self._fast[role]
        except KeyError:
            fast = self._with_bodies(role)
        if not key:
            key = new_key()
        elif len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key: at most {MAX_KEY_LENGTH} characters")
        try:
            (first, second, head, cut, counter, second_counter, shadow_counter, epoch, bucket_of,
             _) = fast
        except ValueError:  # as the snapshot built it: given its run-id slots on first use
            fast = self._fast[role] = with_run_slots(fast, self._run_stem)  # one key: atomic
            (first, second, head, cut, counter, second_counter, shadow_counter, epoch, bucket_of,
             _) = fast
        if (attributes or bucket_of is None) and self._snapshot is not None:
            # Rules read the attributes; a role bucketed by one needs its value.
            targeted = self._snapshot.targeted(role, key, attributes, self._stale)
            if targeted is not None:
                targeted["run_seq"], targeted["run_stem"] = next(self._exposures.counter(
                    role, targeted["config"], targeted["arm"], epoch)), self._run_stem
                if shadow_counter is not None:
                    next(shadow_counter)  # shadow: the candidate runs this job too
                return targeted
        if head is not None:
            # A version-2 split inlined (rolegate.fast_bucket): bucket(...) < share.
            if _xxh3((head + key).encode()) < cut:
                first, counter = second, second_counter
        else:
            if second is not None and bucket_of is not None and bucket_of(key) < cut:
                first, counter = second, second_counter
            if shadow_counter is not None:
                next(shadow_counter)  # shadow: the candidate runs this job too
        answer: Resolution = first.copy()
        answer["run_seq"] = next(counter)  # the run's id in two parts: `rolegate.run_ids`
        answer["key"] = key
        if self._stale:  # the precompiled answers say "stale": False
            answer["stale"] = True
        return answer

    @property
    def max_age(self) -> float | None:
        """Seconds the snapshot may go unconfirmed before resolving raises SnapshotTooOld."""
        return self._max_age

    @max_age.setter
    def max_age(self, value: float | None) -> None:
        if value is not None and value <= 0:
            raise ValueError("max_age must be positive (or None)")
        self._max_age = value
        self._deadline = self._confirmed + (math.inf if value is None else value)

    def allowed(self, resolution: Mapping[str, Any], tool: str) -> bool:
        """May the run under `resolution` call `tool`? False when the role's gate forbids it.

        Forbidden: listed in the gate's `forbidden_tools`, or outside its
        `allowed_tools` when the role has an allowlist (the rules the tripwire
        applies to a finished run), read from the snapshot in use. Ask before a
        tool's side effect and a forbidden call never happens.
        """
        role = resolution["role"]
        snapshot = self._snapshot
        gate = snapshot.gate(role) if snapshot is not None else None
        if gate is None:
            raise self._unknown(role)
        return gate.allows(tool)

    def _with_bodies(self, role: str) -> Fast:
        """A role waiting for a config body (`rolegate.body_cache`): fetched now, or raises."""
        snapshot = self._snapshot
        if snapshot is None or role not in snapshot.pending and role not in snapshot.entries:
            raise self._unknown(role)
        return self._bodies.complete(snapshot, role)

    def _unknown(self, role: str) -> RolegateError:
        if self._snapshot is None:
            return SnapshotUnavailable(
                f"no bindings snapshot yet: the router at {self.url} has not answered "
                f"({self.last_error or 'first refresh under way'}) and no bootstrap was given",
                url=self.url)
        return NotFound(f"no binding for role {role!r}", role=role)

    @property
    def stale(self) -> bool:
        """True while the last refresh failed or the snapshot came from a bootstrap."""
        return self._stale

    @property
    def generation(self) -> int:
        """The generation of the snapshot in use (-1 before any)."""
        return self._snapshot.generation if self._snapshot is not None else -1

    def age(self) -> float:
        """Seconds since the router last confirmed the snapshot."""
        return _monotonic() - self._confirmed

    def roles(self) -> list[str]:
        """The roles the snapshot knows, sorted."""
        snapshot = self._snapshot
        return snapshot.roles() if snapshot is not None else []

    def snapshot(self) -> dict[str, Any]:
        """The snapshot in use, in the shape of `GET /v1/bindings`."""
        if self._snapshot is None:
            raise SnapshotUnavailable("no snapshot loaded")
        return self._snapshot.to_json()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the snapshot in use to `path`, for a later `bootstrap=path`."""
        if self._snapshot is None:
            raise SnapshotUnavailable("no snapshot loaded")
        self._snapshot.save(path)

    def _post_exposures(self, rows: list[dict[str, Any]]) -> None:
        self._exposure_api.request("POST", EXPOSURES_PATH, ok=(200,), json={"exposures": rows})

    def _restart_in_child(self) -> None:
        """In a forked child: own connections, own threads, and stale until the router answers."""
        if self._closed:
            return
        self._api = self._refresh_api()  # the parent's pooled sockets are the parent's
        self._bodies.after_fork()
        self._stale = True
        self.last_error = "forked: this process has not heard from the router yet"
        self._reporter.after_fork_in_child()
        self._exposures = Exposures()  # the parent sends its own counts
        self._run_stem = self._exposures.run_stem  # and mints its own ids
        if self._snapshot is not None:
            self._snapshot.count_with(self._exposures)
            self._fast = self._snapshot.entries
        self._exposure_api = self._refresh_api()
        self._sender = Sender(self._exposures, self._post_exposures, time.time)
        self._start_refreshing()

    def _too_old(self) -> SnapshotTooOld:
        # Rounded up to the millisecond: an age just past max_age must not read as equal.
        age = math.ceil(self.age() * 1000) / 1000
        return SnapshotTooOld(
            f"the bindings snapshot is {age:.3f}s old, over max_age={self.max_age:g}s: "
            f"the router at {self.url} has not confirmed it ({self.last_error})",
            age_s=age, max_age_s=self.max_age, url=self.url)

    # -- reporting -----------------------------------------------------------

    def report(self, trace: Trace | Mapping[str, Any]) -> None:
        """Queue `trace` for sending; never blocks (a full queue drops the oldest).

        With a `mask`, the masked trace is what is queued (the raw one never is).
        """
        if self.mask is not None:
            trace = mask_trace(trace, self.mask)
        self._reporter.report(trace)

    def recorder(self, resolution: Mapping[str, Any], stamps: Stamps | Mapping[str, Any] | None
                 = None, **fields: Any) -> Recorder:
        """A Recorder for one run under `resolution`; it reports its trace when finished.

        Stamps: `stamps` when given; else, when the run's config has a body, its
        model and hashes (`rolegate.body`) with the client's `agent_version`;
        else the client's `stamps`. `fields` go to Recorder (`run_id`,
        `shadow`, `input`, `scenario`).
        """
        chosen: Stamps | Mapping[str, Any] | None = stamps
        if chosen is None:
            config = resolution.get("shadow" if fields.get("shadow") else "config")
            snapshot = self._snapshot
            derived = self._bodies.stamps(snapshot, config) if snapshot and config else None
            if derived is not None and self.agent_version:
                chosen = {**derived, "agent_version": self.agent_version}
            else:
                chosen = self.stamps
        if chosen is None:
            raise ValueError("stamps are required: pass them here, or to Client(stamps=...), "
                             "or register the config's body and give Client(agent_version=...)")
        return Recorder(resolution, chosen, sink=self.report, **fields)

    def report_stats(self) -> ReportStats:
        """Counts of traces queued, sent, dropped (queue full), rejected and unsent."""
        return self._reporter.stats()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued trace was sent (or refused); False on timeout."""
        return self._reporter.flush(timeout)

    # -- lifetime ------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Flush queued traces and stop; returns within `timeout` (default `flush_timeout`).

        Whatever the router does (down, hung): traces not sent by then are
        counted `unsent` and logged. A refresh thread inside a watch that cannot
        be interrupted ends by itself when the watch answers.
        """
        bound = self.flush_timeout if timeout is None else max(0.0, timeout)
        deadline = _monotonic() + bound
        self._closed = True
        atexit.unregister(self._reporter.close)
        atexit.unregister(self._sender.close)
        self._stop.set()
        self._reporter.close(bound)
        self._sender.close(max(0.0, min(1.0, deadline - _monotonic())))
        if self._thread.is_alive():
            self._thread.join(max(0.0, min(deadline - _monotonic(), REFRESH_JOIN_S)))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _restart_in_child(ref: weakref.ReferenceType[Client]) -> None:
    client = ref()
    if client is not None:
        client._restart_in_child()
