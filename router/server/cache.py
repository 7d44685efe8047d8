"""Each worker's in-process copy of the bindings, which resolves are served from.

A daemon thread polls the store's change hint (the generation counter) every
`interval` seconds and reloads the table when it moved, so a change shows in
every worker within about one interval. Every `full_reload_interval` it reloads
whatever the hint says: a change whose hint was lost (docs/scaling.md) is found
there, and the hint is bumped again so every other router hears of it. When
Redis stops answering the copy is kept and marked stale: routing on the last
known bindings beats failing every job.

Each time it loads a new table it also keeps it on disk (`snapshot_path`, in
the data directory), so a worker, or a whole router, that starts while Redis
is unreachable serves the last good table, marked stale, instead of nothing.

A table Redis gives is never taken on trust when it drops or lowers a role the
copy holds (bindings.table_guard): versions only grow and archiving keeps the
record, so that is Redis having lost data (an empty restart, a FLUSHALL, a
replica promoted before it synced). Such roles keep their held record, marked
stale, the file on disk is left as it was, the loss is logged as an error and
shown in /healthz and the metrics (`lost`), until an operator writes the kept
table back (bindings.recovery) or Redis has the roles again. A worker that
starts afresh guards the table kept on disk the same way, if it came from the
same Redis (bindings.identity; router.server.kept_file sets any other aside).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bindings import kept_copies
from bindings.errors import CorruptRecord, RolegateError, StoreUnavailable
from bindings.identity import ensure_identity, read_identity, same_redis
from bindings.models import VersionedBinding
from bindings.recovery import read_table
from bindings.store import BindingStore
from bindings.table_guard import kept_table, lost_roles, summary
from router.server import kept_file

log = logging.getLogger("rolegate.cache")
#: How often a loss of Redis's data is logged again while it lasts.
LOST_LOG_INTERVAL_S = 30.0
#: How often a worker serving lost roles publishes its kept copies again (bindings.kept_copies).
KEPT_PUBLISH_INTERVAL_S = 10.0


class BindingCache:
    """A refreshed, read-mostly copy of the binding table."""

    def __init__(self, store: BindingStore, interval: float,
                 full_reload_interval: float = 5.0, snapshot_path: Path | None = None,
                 address: str = "") -> None:
        self.store = store
        #: Which Redis (and database) this is, as the kept file records it (bindings.identity).
        self.address = address
        self.interval = interval
        #: Where the last good table is kept on disk (None: nowhere).
        self.snapshot_path = snapshot_path
        self.full_reload_interval = full_reload_interval
        self._last_full = time.monotonic()
        #: This worker wrote since its last reload (`put`): the next poll reloads.
        self._reload_next = False
        self.bindings: dict[str, VersionedBinding] = {}
        #: The version each archived role was archived at (as Redis said, or as held when
        #: Redis lost it): a backup from before an archive must not bring the role back.
        self.archived: dict[str, int] = {}
        self.generation = -1
        self.loaded = False
        self.stale = False
        #: Roles Redis lost (bindings.table_guard), served from their held record: why each.
        self.lost: dict[str, str] = {}
        #: The generation of the table held when the loss was found (a restore goes above it).
        self.kept_generation = -1
        self._lost_logged = 0.0
        #: Whether this worker said its kept file came from another Redis (said once).
        self._foreign_said = False
        #: What this worker last published of its kept records (bindings.kept_copies), and when.
        self._published: dict[str, int] = {}
        self._published_at = 0.0
        self._lock = threading.Lock()
        #: Held while a process loads its first copy and starts its polling thread.
        self._start_lock = threading.Lock()
        self._owner_pid: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Called with the exception each time a refresh finds Redis unreachable (metrics).
        self.error_listeners: list[Callable[[Exception], None]] = []

    def get(self, role: str) -> tuple[VersionedBinding | None, bool]:
        """The cached binding of `role` (None if unknown) and whether it is stale.

        Stale: Redis does not answer, or it lost this role (its held record is served).
        """
        self._ensure_thread()
        return self.bindings.get(role), self.stale or role in self.lost

    def all(self) -> tuple[dict[str, VersionedBinding], bool]:
        """Every cached binding and whether the copy is stale (or keeps roles Redis lost)."""
        self._ensure_thread()
        return self.bindings, self.stale or bool(self.lost)

    def guarded(self) -> tuple[int, dict[str, VersionedBinding], dict[str, str]]:
        """Redis's table read now, with the held record of each role Redis lost, and why.

        What `GET /v1/bindings` and a watch answer: a caller's snapshot must not
        go dark either when this worker's next poll has yet to notice the loss.
        """
        self._ensure_thread()
        held, held_archived = self.bindings, self.archived
        table = read_table(self.store, held.keys())
        lost = lost_roles(held, table.bindings, table.archived, held_archived)
        return table.generation, kept_table(held, table.bindings, lost), lost

    def put(self, record: VersionedBinding) -> None:
        """Take a record this worker just wrote, so it serves it before the next poll.

        The next poll reloads whatever the change hint says: the hint moved past the one
        held, and a Redis that lost its data before that poll shows a hint that may
        equal the held one again (flushed to 0 right after the first writes), which
        would leave this record served fresh from a Redis that no longer has it.
        """
        with self._lock:
            known = self.bindings.get(record.role)
            if known is None or known.version < record.version:
                self.bindings = {**self.bindings, record.role: record}
            self._reload_next = True

    def drop(self, role: str, version: int) -> None:
        """Forget a role this worker just archived (at `version`), so it stops serving it now.

        Its archived version is kept: the role index no longer lists it, and a
        Redis that later shows it live below that version lost the archive.
        """
        with self._lock:
            if role in self.bindings:
                self.bindings = {r: rec for r, rec in self.bindings.items() if r != role}
            self.archived = {**self.archived, role: version}

    def refresh(self) -> bool:
        """Poll once; reload on a change. True if the copy is current afterwards."""
        try:
            generation = self.store.generation()
            full = time.monotonic() - self._last_full >= self.full_reload_interval
            # After an outage reload whatever the counter says: a Redis that came
            # back without its data may show a counter equal to the one we hold.
            if (generation != self.generation or not self.loaded or self.stale or self.lost
                    or full or self._reload_next):
                self._reload()
        except (StoreUnavailable, redis.RedisError) as exc:
            for listener in self.error_listeners:
                listener(exc)
            if not self.loaded:
                self._load_saved()
            if not self.stale:
                log.warning("binding store unreachable, serving the last copy: %s", exc)
            self.stale = True
            return False
        except CorruptRecord as exc:
            # Not an outage but a bad record: say so loudly every poll, keep
            # serving the last good copy marked stale, and keep polling so a
            # repaired record is picked up (a dead thread would serve old data
            # forever without saying so).
            log.error("binding table unreadable, serving the last copy: %s", exc.message)
            self.stale = True
            return False
        if self.stale:
            log.warning("binding store reachable again")
        self.stale = False
        return not self.lost

    def _reload(self) -> None:
        """Read the whole table and take it, except the roles Redis lost (table_guard)."""
        if self.loaded:
            held, held_archived, held_generation = self.bindings, self.archived, self.generation
        else:
            # A worker starting afresh guards the table its router kept on disk.
            held, held_archived, held_generation = self._saved_here()
        self._reload_next = False  # before the read: a write racing it asks again
        table = read_table(self.store, held.keys())
        self._last_full = time.monotonic()
        lost = lost_roles(held, table.bindings, table.archived, held_archived)
        bindings = kept_table(held, table.bindings, lost)
        # Archived as Redis says; as held where Redis lost the role or shows it older.
        archived = {**{role: v for role, v in held_archived.items()
                       if role in lost or (role not in table.bindings
                                           and role not in table.archived)},
                    **{role: v for role, v in table.archived.items() if role not in lost}}
        generation = table.generation
        if self.loaded and generation == held_generation:
            self._repair_lost_hint(held, bindings)
        self._report_lost(lost, held_generation)
        self._share_kept(kept_copies.Copy({role: bindings[role] for role in lost if role in held},
                                          {role: archived[role] for role in lost
                                           if role not in held}))
        with self._lock:
            # Swap the whole dict: readers never see a half-built table.
            self.bindings = bindings
            self.archived = archived
            self.generation = generation
            self.lost = lost
            self.loaded = True
        # While Redis lacks roles, the file keeps the last good table as it was.
        if not lost and (generation != held_generation or bindings != held
                         or archived != held_archived):
            self._save(generation, bindings, archived)

    def _report_lost(self, lost: dict[str, str], held_generation: int) -> None:
        """Log a loss loudly when found, again every LOST_LOG_INTERVAL_S, and its end."""
        now = time.monotonic()
        if lost and (lost != self.lost or now - self._lost_logged >= LOST_LOG_INTERVAL_S):
            if not self.lost:
                self.kept_generation = max(held_generation, self.generation)
            self._lost_logged = now
            log.error("%s (kept table: generation %d)", summary(lost), self.kept_generation)
        elif not lost and self.lost:
            log.warning("Redis holds every role of the kept table again: serving its table")

    def _share_kept(self, kept: kept_copies.Copy) -> None:
        """Publish this worker's kept copy of the lost roles; withdraw it when none are.

        The worker answering `restore-snapshot` or `accept-redis` acts on the
        newest copy any worker holds, which it can only learn from Redis.
        """
        versions = {**{role: rec.version for role, rec in kept.records.items()},
                    **kept.archived}
        now = time.monotonic()
        if versions == self._published and (
                not versions or now - self._published_at < KEPT_PUBLISH_INTERVAL_S):
            return
        try:
            if versions:
                kept_copies.publish(self.store.connection, kept_copies.worker_name(), kept)
            else:
                kept_copies.withdraw(self.store.connection, kept_copies.worker_name())
        except RolegateError as exc:
            log.warning("could not share this worker's kept copies of the lost roles: %s",
                        exc.message)
            return
        self._published, self._published_at = versions, now

    def _repair_lost_hint(self, held: dict[str, VersionedBinding],
                          loaded: dict[str, VersionedBinding]) -> None:
        """Announce roles that changed while the hint stood still (their hint was lost).

        A write caught between its compare-and-set and its hint looks the same
        and gets a second hint: harmless, every router just reloads once more.
        """
        for role, record in loaded.items():
            known = held.get(role)
            if known is None or known.version < record.version:
                log.warning("change hint repaired: role %r is at version %d but the hint "
                            "never moved", role, record.version)
                self.store.announce(role)
        for role in held.keys() - loaded.keys() - self.lost.keys():
            # Only archiving takes a role out of the table.
            log.warning("change hint repaired: role %r left the table but the hint "
                        "never moved", role)
            self.store.announce(role)

    def start(self) -> None:
        """Load the table and start polling in this process, now (gunicorn's post_worker_init).

        Otherwise the first request would: a worker that starts during an
        outage then has its saved table ready before anyone asks.
        """
        self._ensure_thread()

    def _save(self, generation: int, bindings: dict[str, VersionedBinding],
              archived: dict[str, int]) -> None:
        """Keep `bindings` on disk with the Redis they came from (router.server.kept_file)."""
        if self.snapshot_path is None:
            return
        try:
            identity = ensure_identity(self.store.connection)
        except RolegateError:
            identity = ""  # a read-only replica: the address alone says where it came from
        kept_file.save(self.snapshot_path, generation, bindings,
                       {"address": self.address, "identity": identity}, archived)

    def _saved_here(self) -> tuple[dict[str, VersionedBinding], dict[str, int], int]:
        """The table kept on disk if it came from this Redis; else set aside, and nothing."""
        kept = None if self.snapshot_path is None else kept_file.read(self.snapshot_path)
        if kept is None:
            return {}, {}, -1
        identity = None
        if kept.redis is not None and kept.redis.get("address") != self.address:
            identity = read_identity(self.store.connection)
        if not same_redis(kept.redis, self.address, identity):
            assert self.snapshot_path is not None
            kept_file.set_aside(self.snapshot_path, kept, self.address)
            return {}, {}, -1
        return kept.bindings, kept.archived, kept.generation

    def _load_saved(self) -> None:
        """Serve the table kept on disk (stale) when Redis cannot give us one.

        Not one kept from another address: with Redis silent nothing shows it
        is this one under another name, and another Redis's table is not ours.
        """
        saved = None if self.snapshot_path is None else kept_file.read(self.snapshot_path)
        if saved is None:
            return
        if saved.redis is not None and saved.redis.get("address") != self.address:
            if self._foreign_said:
                return
            self._foreign_said = True
            log.warning("Redis unreachable at start, and the binding table kept in %s came "
                        "from %s, not %s: not serving it", self.snapshot_path,
                        saved.redis.get("address"), self.address)
            return
        bindings, generation = saved.bindings, saved.generation
        with self._lock:
            self.bindings = bindings
            self.archived = saved.archived
            self.generation = generation
            self.loaded = True
        log.warning("Redis unreachable at start: serving the binding table kept in %s "
                    "(generation %d, %d roles), marked stale", self.snapshot_path,
                    generation, len(bindings))

    def stop(self) -> None:
        """Stop the polling thread and wait for it (tests; workers just exit)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def _ensure_thread(self) -> None:
        # The thread must be started in the process that serves: gunicorn forks
        # workers after the app is built, and threads do not survive a fork.
        pid = os.getpid()
        if self._owner_pid == pid:
            return
        with self._start_lock:
            if self._owner_pid == pid:
                return
            self._stop = threading.Event()
            # Load before anyone sees this process as started: the requests
            # racing in on a fresh worker wait here instead of finding no table.
            self.refresh()
            thread = threading.Thread(target=self._run, name="rolegate-binding-cache",
                                      daemon=True)
            thread.start()
            self._thread = thread
            self._owner_pid = pid

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the poller must outlive any one poll
                # redis-py's cluster client can raise plain Python errors while
                # it rebuilds its slot map around a dead master; a dead poller
                # would serve the old table forever without saying so.
                log.exception("binding poll failed, serving the last copy")
                self.stale = True
