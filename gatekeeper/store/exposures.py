"""Exposures in Redis: every assignment, counted per role, config, arm, stage epoch, time bucket.

One hash per (role, config, arm, stage epoch),
``rolegate:{role}:exposures:{config}:{arm}:{epoch}``, a field per time bucket of
`gatekeeper.stats.concurrent.BUCKET_S` seconds holding the runs assigned in it.
Writers (a router worker's HTTP resolves, an SDK's in-process resolves through
POST /v1/exposures) add counts with HINCRBY, so several workers and clients sum,
and nothing read-modify-writes. Read by the gate view's `reports` section.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.store.traces import WINDOW_TTL_S

EXPOSURES_KEY_TEMPLATE = "rolegate:{{{role}}}:exposures:{config}:{arm}:{epoch}"


@dataclass(frozen=True)
class Exposure:
    """`count` runs of (role, config, arm) assigned in stage `epoch` during time `bucket`."""

    role: str
    config: str
    arm: str
    epoch: str
    bucket: int
    count: int


def exposures_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The hash of (role, config, arm)'s assignments in one stage."""
    return EXPOSURES_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


class ExposureStore:
    """Adds and reads assignment counts."""

    def __init__(self, connection: Connection, ttl_s: int = WINDOW_TTL_S) -> None:
        self.connection = connection
        self.ttl_s = ttl_s

    def add(self, exposures: Iterable[Exposure]) -> int:
        """Add each count (one round trip, no transaction: each HINCRBY stands alone)."""
        added = 0
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for e in exposures:
                if e.count <= 0:
                    continue
                key = exposures_key(e.role, e.config, e.arm, e.epoch)
                pipe.hincrby(key, str(e.bucket), e.count)
                pipe.expire(key, self.ttl_s)
                added += e.count
            if added:
                pipe.execute()
        return added

    def buckets(self, role: str, config: str, arm: str, epoch: str) -> dict[int, int]:
        """{time bucket: runs assigned} of (role, config, arm) in stage `epoch`."""
        with _redis_errors():
            raw = self.connection.hgetall(exposures_key(role, config, arm, epoch))
        return {int(k): int(v) for k, v in raw.items()}
