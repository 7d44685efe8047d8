"""Exposures in Redis: every assignment, counted per role, config, arm, stage epoch, time bucket
and reporter.

One hash per (role, config, arm, stage epoch),
``rolegate:{role}:exposures:{config}:{arm}:{epoch}``, a field per (time bucket of
`rolegate.exposures.BUCKET_S` seconds, reporter), ``"<bucket>:<reporter>"``,
holding the runs assigned in it. The reporter is the token that sent the count
(POST /v1/exposures: an SDK's in-process resolves under the SDK's token), or for
the assignments a router counts itself (HTTP resolve, its fast path, OFREP) the
token that resolved: the router stamps it, never the body. So each reporter's
assignments are set against that reporter's own reports (the reporter windows'
``rep:`` fields, `reported`), and a token that counts assignments it never
reports is short on its own, not on the arm (`gatekeeper.stats.reports`). A
field without a reporter (written before reporters were kept) reads as reporter "".

Writers add counts with HINCRBY, so several workers and clients sum, and nothing
read-modify-writes. Read by the gate view's `reports` section.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.stats.matching import ID_REPORTED, REPORTED
from gatekeeper.store.trace_keys import pending_key, reporter_window_key
from gatekeeper.store.traces import WINDOW_TTL_S
from gatekeeper.store.window_fold import pending_counts

EXPOSURES_KEY_TEMPLATE = "rolegate:{{{role}}}:exposures:{config}:{arm}:{epoch}"

#: reporter -> {time bucket: runs}.
ByReporter = dict[str, dict[int, int]]


@dataclass(frozen=True)
class Exposure:
    """`count` runs of (role, config, arm) assigned in stage `epoch` during time `bucket`,
    counted by `reporter`."""

    role: str
    config: str
    arm: str
    epoch: str
    bucket: int
    count: int
    reporter: str = ""


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
                pipe.hincrby(key, f"{e.bucket}:{e.reporter}", e.count)
                pipe.expire(key, self.ttl_s)
                added += e.count
            if added:
                pipe.execute()
        return added

    def by_reporter(self, role: str, config: str, arm: str, epoch: str) -> ByReporter:
        """reporter -> {time bucket: runs assigned} of (role, config, arm) in stage `epoch`."""
        with _redis_errors():
            raw = self.connection.hgetall(exposures_key(role, config, arm, epoch))
        out: ByReporter = {}
        for field, value in raw.items():
            # A view reads thousands of these: plain operations, no helper calls.
            bucket, _, reporter = (field if isinstance(field, str)
                                   else field.decode()).partition(":")
            own = out.get(reporter)
            if own is None:
                own = out[reporter] = {}
            b = int(bucket)
            own[b] = own.get(b, 0) + int(value)
        return out

    def buckets(self, role: str, config: str, arm: str, epoch: str) -> dict[int, int]:
        """{time bucket: runs assigned} of (role, config, arm) in stage `epoch`, every reporter."""
        out: dict[int, int] = {}
        for own in self.by_reporter(role, config, arm, epoch).values():
            for bucket, n in own.items():
                out[bucket] = out.get(bucket, 0) + n
        return out

    def reported(self, role: str, config: str, arm: str, epoch: str,
                 asks: Mapping[str, Iterable[int]]) -> ByReporter:
        """reporter -> {time bucket: runs that reporter reported} for the asked buckets.

        Read from each reporter's own window (its ``rep:`` fields) with the window's
        pending increments (`window_fold`) in one MULTI, so no report is missed or
        counted twice.
        """
        return self.reports_of(role, config, arm, epoch, asks)[0]

    def reports_of(self, role: str, config: str, arm: str, epoch: str,
                   asks: Mapping[str, Iterable[int]]) -> tuple[ByReporter, ByReporter]:
        """(`reported`, and of those the runs reported under a minted run id: the
        ``rid:`` fields, `gatekeeper.stats.matching`), read together."""
        names = sorted(asks)
        wanted = {name: sorted(set(asks[name])) for name in names}
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.lrange(pending_key(role, config, arm, epoch), 0, -1)
            for name in names:
                if wanted[name]:
                    pipe.hmget(reporter_window_key(role, config, arm, epoch, name),
                               [f"{REPORTED}{b}" for b in wanted[name]]
                               + [f"{ID_REPORTED}{b}" for b in wanted[name]])
            answers = iter(pipe.execute())
        _, pending = pending_counts(next(answers))
        out: ByReporter = {}
        with_ids: ByReporter = {}
        for name in names:
            asked = wanted[name]
            stored = next(answers) if asked else []
            extra = pending.get(name, Counter())
            out[name] = {b: int(v or 0) + extra.get(f"{REPORTED}{b}", 0)
                         for b, v in zip(asked, stored)}
            with_ids[name] = {b: int(v or 0) + extra.get(f"{ID_REPORTED}{b}", 0)
                              for b, v in zip(asked, stored[len(asked):])}
        return out, with_ids
