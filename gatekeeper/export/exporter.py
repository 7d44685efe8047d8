"""The OTLP exporter loop: one leader (a Redis lease), reading every role's stored runs.

Ingest never waits on it: it runs apart from the request path (its own process,
`rolegate export-otlp`, which `rolegate serve` starts when
ROLEGATE_EXPORT_OTLP_ENDPOINT is set) and reads what ingest already stored, after
a cursor per stream kept in Redis (`gatekeeper.store.export_cursor`). A cursor
moves only once the collector took the batch, so a collector that is down, slow
or answering 429/503 only makes the lag grow; a restart, or another router's
exporter taking the lease over, resumes at the cursor. Delivery is at least
once: a batch whose answer was lost is sent again with the same span ids.

Runs are dropped, and counted, only when they can never be sent: trimmed from
the stream (past the role's retention) before export, refused by the collector
with a 400 (a batch is halved until the refused run stands alone) or partly
refused (`partialSuccess`), or unreadable in Redis.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from bindings.connection import Connection
from bindings.errors import RolegateError
from bindings.lease import LeaseStore
from bindings.store import BindingStore, load_stored
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.export.otlp_send import OtlpSender, backoff
from gatekeeper.export.otlp_spans import ExportedRun, export_request
from gatekeeper.export.stages import StageTimeline
from gatekeeper.store.export_cursor import ExportCursors, StreamState, id_order
from gatekeeper.store.trace_keys import stream_id_time
from rolegate.trace import Trace

log = logging.getLogger("rolegate.export")

LEASE_NAME = "otlp-export"
DEFAULT_BATCH = 512
DEFAULT_INTERVAL_S = 1.0


@dataclass
class _Taken:
    """The entries of one stream in a batch: the last id read and how many."""

    state: StreamState
    last_id: str = ""
    count: int = 0


@dataclass
class Batch:
    """Runs read for one export, and what each stream's cursor moves to once it is done."""

    runs: list[ExportedRun] = field(default_factory=list)
    taken: list[_Taken] = field(default_factory=list)
    unreadable: int = 0


class OtlpExporter:
    """Exports stored runs to one collector while it holds the export lease."""

    def __init__(self, connection: Connection, sender: OtlpSender, *,
                 holder: str | None = None, batch: int = DEFAULT_BATCH,
                 interval_s: float = DEFAULT_INTERVAL_S, lease_ttl_s: float = 30.0,
                 version: str = "") -> None:
        self.connection = connection
        self.sender = sender
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.batch = batch
        self.interval_s = interval_s
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        self.version = version
        self.stop = threading.Event()
        self.cursors = ExportCursors(connection)
        self.bindings = BindingStore(connection)
        self.leases = LeaseStore(connection, LEASE_NAME)
        self.stages = StageTimeline(connection)

    # -- the loop ------------------------------------------------------------

    def run(self) -> None:
        """Export until `stop` is set; wait an interval whenever nothing was waiting."""
        try:
            while not self.stop.is_set():
                try:
                    busy = self.lead() and self.once() > 0
                except RolegateError as exc:  # Redis away: the runs wait there
                    log.warning("otlp export: %s", exc)
                    busy = False
                if not busy:
                    self.stop.wait(self.interval_s)
        finally:
            self._release()

    def lead(self) -> bool:
        """Take or renew the lease; only its holder exports."""
        return self.leases.acquire(self.holder, self.lease_ttl_ms)

    def once(self) -> int:
        """Export one batch of what is waiting; the runs passed (exported or dropped)."""
        batch = self.collect()
        if not batch.taken:
            return 0
        if batch.runs and not self.deliver(batch.runs):
            return 0  # stopped, or the lease passed on: the next holder sends them
        return self.commit(batch)

    # -- reading -------------------------------------------------------------

    def collect(self) -> Batch:
        """Read up to `batch` runs, oldest waiting stream first; count trimmed runs as drops."""
        waiting: list[StreamState] = []
        for role in self.bindings.roles():
            state = self.cursors.role_state(role)
            for stream in state.streams:
                if stream.trimmed:
                    self._drop_trimmed(stream)
                elif stream.pending:
                    waiting.append(stream)
        waiting.sort(key=lambda s: id_order(s.next_id))
        wanted: list[tuple[StreamState, int]] = []
        room = self.batch
        for stream in waiting:
            if room <= 0:
                break
            take = min(max(stream.lag, 1), room)
            wanted.append((stream, take))
            room -= take
        batch = Batch()
        refreshed: set[str] = set()
        for (stream, _), entries in zip(wanted, self.cursors.read(wanted)):
            if not entries:
                continue
            if stream.role not in refreshed:
                self.stages.refresh(stream.role)
                refreshed.add(stream.role)
            taken = _Taken(stream)
            for ident, fields in entries:
                run = self._run(stream, ident, fields)
                if run is None:
                    batch.unreadable += 1
                else:
                    batch.runs.append(run)
                taken.last_id, taken.count = ident, taken.count + 1
            batch.taken.append(taken)
        return batch

    def _run(self, stream: StreamState, ident: str,
             fields: dict[bytes, bytes]) -> ExportedRun | None:
        try:
            trace = load_stored(Trace, fields[b"t"], f"stored trace {ident}")
            verdict = _verdict(fields[b"v"])
        except (KeyError, ValueError, RolegateError) as exc:
            log.error("otlp export: run %s of %s unreadable, dropped: %s", ident,
                      stream.role, exc)
            return None
        received = stream_id_time(ident)
        return ExportedRun(stream_id=ident, received=received, trace=trace, verdict=verdict,
                           stage=self.stages.stage_at(stream.role, received))

    def _drop_trimmed(self, stream: StreamState) -> None:
        n = stream.trimmed
        if self.cursors.advance(stream.role, [(stream, stream.cursor, n)]):
            log.error("otlp export: %d run(s) of %s (%s, %s) were trimmed past the retention "
                      "before they were exported", n, stream.role, stream.config, stream.arm)
            self.cursors.count({"dropped:trimmed": n})

    # -- sending -------------------------------------------------------------

    def deliver(self, runs: Sequence[ExportedRun]) -> bool:
        """Send `runs` until the collector has them (or refused them for good).

        False when stopped or when the lease was lost while retrying: nothing is
        counted and the cursors stay, so the runs go out again.
        """
        body = export_request(runs, self.version).SerializeToString()
        attempt = 0
        while True:
            outcome = self.sender.send(body)
            if outcome.verdict == "ok":
                self.cursors.count({"exported": len(runs) - outcome.rejected,
                                    "dropped:rejected": outcome.rejected},
                                   last_success=time.time())
                return True
            if outcome.verdict in ("reject", "too_large") and len(runs) > 1:
                # Halve until the run the collector refuses stands alone.
                half = len(runs) // 2
                return self.deliver(runs[:half]) and self.deliver(runs[half:])
            if outcome.verdict in ("reject", "too_large"):
                log.error("otlp export: collector refused run %s of %s, dropped: %s",
                          runs[0].trace.run_id, runs[0].trace.role, outcome.message)
                reason = "rejected" if outcome.verdict == "reject" else "too_large"
                self.cursors.count({f"dropped:{reason}": 1},
                                   last_error=outcome.message[:300])
                return True
            wait = backoff(attempt, outcome.wait_s)
            attempt += 1
            log.warning("otlp export: %d run(s) not taken (%s); again in %.1f s", len(runs),
                        outcome.message, wait)
            self.cursors.count({"retries": 1}, last_error=outcome.message[:300])
            if self.stop.wait(wait) or not self.lead():
                return False

    def commit(self, batch: Batch) -> int:
        """Move each stream's cursor past what the batch read; the runs passed."""
        by_role: dict[str, list[tuple[StreamState, str, int]]] = {}
        for taken in batch.taken:
            by_role.setdefault(taken.state.role, []).append(
                (taken.state, taken.last_id, taken.count))
        passed = 0
        for role, moves in by_role.items():
            if self.cursors.advance(role, moves):
                passed += sum(count for _, _, count in moves)
            else:
                log.warning("otlp export: %s's cursors moved under us (another exporter); "
                            "its last batch may arrive twice", role)
        if batch.unreadable:
            self.cursors.count({"dropped:unreadable": batch.unreadable})
        return passed

    def _release(self) -> None:
        try:
            self.leases.release(self.holder)
        except RolegateError:
            pass  # it expires on its own


@functools.lru_cache(maxsize=1024)
def _verdict(raw: bytes) -> TraceVerdict:
    # Most runs of a role share one of a few verdicts: each is read once.
    return TraceVerdict.from_json(json.loads(raw))
