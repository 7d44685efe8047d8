"""Which stage a role was in when a run arrived, from the role's append-only history.

The stored run does not carry the stage; its role's history does (every change
with its time and the whole binding). Read incrementally: a role's history is
read once, then only the entries added since.
"""

from __future__ import annotations

import bisect

from bindings.connection import Connection
from bindings.models import HistoryEntry
from bindings.store import _redis_errors, history_key, load_stored


class StageTimeline:
    """Each role's stage changes as (time, stage), read from its history and kept."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._times: dict[str, list[float]] = {}
        self._stages: dict[str, list[str]] = {}

    def refresh(self, role: str) -> None:
        """Read the history entries of `role` written since the last refresh."""
        key = history_key(role)
        times = self._times.setdefault(role, [])
        stages = self._stages.setdefault(role, [])
        with _redis_errors():
            length = int(self.connection.llen(key))
            if length < len(times):
                # Rewritten (written back after Redis lost data): read it afresh.
                times.clear()
                stages.clear()
            raws = self.connection.lrange(key, len(times), -1) if length > len(times) else []
        for raw in raws:
            entry = load_stored(HistoryEntry, raw, "stored history entry", role=role)
            times.append(float(entry.time))
            stages.append(entry.binding.stage.value)

    def stage_at(self, role: str, when: float) -> str | None:
        """The stage `role` was in at `when` (its first stage before its first change)."""
        times = self._times.get(role) or []
        if not times:
            return None
        index = bisect.bisect_right(times, when) - 1
        return self._stages[role][max(index, 0)]
