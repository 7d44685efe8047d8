"""The gatekeepers' heartbeats in Redis: one hash, a field per holder, stamped by Redis's clock.

Key (global, like the lease: it is about the gatekeepers, not one role)::

    rolegate:gatekeeper:heartbeats   hash: holder -> heartbeat JSON (with Redis TIME)

A write also drops holders silent for longer than `heartbeat.KEEP_S`, so a fleet of
short-lived gatekeepers (one per CI job, say) does not grow the hash for ever.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from bindings.connection import Connection
from bindings.redis_errors import redis_errors
from gatekeeper import heartbeat

HEARTBEATS_KEY = "rolegate:gatekeeper:heartbeats"


class HeartbeatStore:
    """Record one gatekeeper's heartbeat; read them all back as a summary."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def now(self) -> float:
        """Redis's clock, in seconds: the one clock every heartbeat is judged by."""
        with redis_errors():
            seconds, micros = self.connection.time()
        return float(seconds) + float(micros) / 1e6

    def beat(self, holder: str, *, leader: bool, interval_s: float, roles_judged: int,
             errors: Sequence[str], dry_run: bool) -> dict[str, Any]:
        """Store `holder`'s heartbeat at Redis's time; returns the summary after it."""
        now = self.now()
        entry = {"holder": holder, "leader": leader, "interval_s": interval_s,
                 "roles_judged": roles_judged, "errors": list(errors)[:heartbeat.MAX_ERRORS],
                 "dry_run": dry_run, "time": now}
        with redis_errors():
            self.connection.hset(HEARTBEATS_KEY, holder, json.dumps(entry))
        entries = self.entries()
        gone = [e["holder"] for e in entries if now - float(e["time"]) > heartbeat.KEEP_S]
        if gone:
            with redis_errors():
                self.connection.hdel(HEARTBEATS_KEY, *gone)
        return heartbeat.summarize(entries, now)

    def entries(self) -> list[dict[str, Any]]:
        """Every stored heartbeat (unreadable ones skipped)."""
        with redis_errors():
            raw = self.connection.hgetall(HEARTBEATS_KEY)
        out = []
        for value in raw.values():
            try:
                entry = json.loads(value)
            except ValueError:
                continue
            if isinstance(entry, dict) and "time" in entry and "holder" in entry:
                out.append(entry)
        return out

    def summary(self) -> dict[str, Any]:
        """`heartbeat.summarize` of every stored heartbeat, at Redis's time."""
        return heartbeat.summarize(self.entries(), self.now())
