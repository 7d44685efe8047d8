"""The current config's carried history: its runs before this stage, counted once per stage.

The gate's tests need current's failure rate (p0) from the stage's first tick,
and in `full` the current arm gets no traffic at all. So p0 rests on the
current config's runs before the stage began as well: its newest
`HISTORY_RUNS` runs as the current arm (and, for a config that was itself a
candidate not long ago, as the candidate arm), read once per stage and kept::

    rolegate:{role}:history:{config}:{epoch}   hash: n, passes, error_runs, forbidden

`epoch` is the stage's window epoch: a new stage counts afresh (the history
then includes the previous stage). The key expires with the stage's aggregates.
Two readers racing compute the same counts, so the first write is as good as
the second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.store.drift_state import run_of_fields
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import WINDOW_TTL_S, StreamEntries
from gatekeeper.window import WindowStats

HISTORY_KEY_TEMPLATE = "rolegate:{{{role}}}:history:{config}:{epoch}"
#: Most runs of the carried history: enough for a p0 within about +-0.007 at 0.5.
HISTORY_RUNS = 5_000
#: The arms whose runs of a config count as its history, newest first within each.
HISTORY_ARMS = ("current", "candidate")


def history_key(role: str, config: str, epoch: str) -> str:
    """The hash holding one config's carried history for one stage."""
    return HISTORY_KEY_TEMPLATE.format(role=role, config=config, epoch=epoch)


class HistoryStore:
    """Counts a config's runs before a stage began, once per stage."""

    def __init__(self, connection: Connection, *, max_runs: int = HISTORY_RUNS,
                 ttl_s: int = WINDOW_TTL_S) -> None:
        self.connection = connection
        self.max_runs = max_runs
        self.ttl_s = ttl_s

    def before(self, role: str, config: str, epoch: str, since: float | None) -> WindowStats:
        """The config's newest runs before `since` (none when the stage has no start)."""
        if since is None:
            return WindowStats()
        key = history_key(role, config, epoch)
        with _redis_errors():
            raw = self.connection.hgetall(key)
        if raw:
            return WindowStats.from_fields(raw)
        counts = self._count(role, config, since)
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hset(key, mapping=cast(Mapping[Any, Any], counts))
            pipe.expire(key, self.ttl_s)
            pipe.execute()
        return WindowStats(counts)

    def _count(self, role: str, config: str, since: float) -> dict[str, int]:
        """n, passes, error_runs and forbidden over the newest runs before `since`."""
        below = f"({max(0, int(since * 1000))}-0"
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for arm in HISTORY_ARMS:
                pipe.xrevrange(stream_key(role, config, arm), max=below, min="-",
                               count=self.max_runs)
            answers = cast(list[StreamEntries], pipe.execute())
        counts = {"n": 0, "passes": 0, "error_runs": 0, "forbidden": 0}
        left = self.max_runs
        for entries in answers:
            for _, fields in entries[:left]:
                run = run_of_fields(fields)
                counts["n"] += 1
                counts["passes"] += run.passed
                counts["error_runs"] += run.tool_error
                counts["forbidden"] += run.forbidden_call
            left = self.max_runs - counts["n"]
        return counts
