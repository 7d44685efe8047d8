"""An arm's newest runs scored against its config's criteria, kept between gate views.

The `by_criterion` section (`gatekeeper.view.criteria`) scores the newest
`SAMPLE` runs of each arm since the stage began. Reading and scoring them (a
JSON trace and verdict each, then every criterion) cost some 30 ms per arm per
view at 1,000 runs, for runs that were nearly all scored at the last view.
Stream entries never change and new ones only ever come after the newest, so
each `TraceStore` keeps the scored runs of the arms it was asked about and
reads only the entries past its newest kept one. In the same round trip it
checks that its oldest and newest kept entries are still there: a stream
trimmed past them (it is only ever trimmed from its oldest end), or deleted and
written again, is read whole. The answer is the one a whole read gives.
"""

from __future__ import annotations

import json
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from bindings.store import _redis_errors
from gatekeeper.checks.criteria import Criterion, evaluate
from gatekeeper.store.configs import ConfigRecord
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import StreamEntries, TraceStore

#: Newest traces scored per arm per read: bounds the cost of one gate view.
SAMPLE = 1_000
#: Arms kept per trace store (the least recently read dropped first).
ARMS_KEPT = 64

#: Per run, newest first: (stream id, job key, criterion key -> verdict).
Scored = tuple[bytes, str, dict[str, bool | None]]
#: (role, config, arm, first stream id of the stage, the config record's version and time).
_Key = tuple[str, str, str, str, int, float]

_kept: weakref.WeakKeyDictionary[TraceStore, OrderedDict[_Key, tuple[Scored, ...]]] = (
    weakref.WeakKeyDictionary())


@dataclass(frozen=True)
class _Run:
    """What a check reads of one stored run, and the invariants' criterion verdicts."""

    key: str
    tools: Sequence[str]
    output_text: str
    input: dict[str, Any] | None
    invariants: dict[str, bool]


def scored_runs(traces: TraceStore, role: str, config: str, arm: str, since: float | None,
                record: ConfigRecord | None) -> list[tuple[str, dict[str, bool | None]]]:
    """The newest `SAMPLE` runs of (role, config, arm) since `since`, oldest first: (job key, verdicts).

    Verdicts are the stored invariants' criterion verdicts, then each of `record`'s criteria.
    """
    low = "-" if since is None else f"{max(0, int(since * 1000))}-0"
    key: _Key = (role, config, arm, low, record.version if record else 0,
                 record.updated_at if record else 0.0)
    arms = _kept.setdefault(traces, OrderedDict())
    kept = arms.get(key)
    criteria = list(record.criteria) if record is not None else []
    stream = stream_key(role, config, arm)
    connection = traces.connection
    with _redis_errors():
        if kept:
            newest, oldest = kept[0][0].decode(), kept[-1][0].decode()
            pipe = connection.pipeline(transaction=False)
            pipe.xrevrange(stream, max="+", min="(" + newest, count=SAMPLE)
            pipe.xrange(stream, min=newest, max=newest)
            pipe.xrange(stream, min=oldest, max=oldest)
            fresh, *still = cast(list[StreamEntries], pipe.execute())
            if not all(still):
                kept = None
        if not kept:
            kept = ()
            fresh = cast(StreamEntries, connection.xrevrange(stream, max="+", min=low,
                                                             count=SAMPLE))
    runs = (*(_scored(entry_id, fields, criteria) for entry_id, fields in fresh),
            *kept)[:SAMPLE]
    arms[key] = runs
    arms.move_to_end(key)
    while len(arms) > ARMS_KEPT:
        arms.popitem(last=False)
    return [(job, verdicts) for _, job, verdicts in reversed(runs)]


def _scored(entry_id: Any, fields: dict[bytes, bytes], criteria: list[Criterion]) -> Scored:
    """One stream entry read and scored."""
    # Validated on ingest: read the few fields a check needs, not the whole model.
    trace = json.loads(fields[b"t"])
    run = _Run(key=trace.get("key") or trace["run_id"], tools=trace.get("tools", ()),
               output_text=trace.get("output_text", ""), input=trace.get("input"),
               invariants=json.loads(fields[b"v"]).get("criteria", {}))
    verdicts: dict[str, bool | None] = dict(run.invariants)
    verdicts.update(evaluate(criteria, run))
    ident = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
    return ident, run.key, verdicts
