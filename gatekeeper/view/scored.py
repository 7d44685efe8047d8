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
#: Per run, as a section reads it: (job key, criterion key -> verdict).
Run = tuple[str, dict[str, bool | None]]
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


def scored_runs(traces: TraceStore, role: str, since: float | None,
                asks: Sequence[tuple[str, str, ConfigRecord | None]]) -> list[list[Run]]:
    """Per (config, arm, its config's record): the newest `SAMPLE` runs since `since`,
    oldest first, as (job key, verdicts).

    Verdicts are the stored invariants' criterion verdicts, then each of the record's
    criteria (kept for the next view: read them, don't change them). Every arm in one
    round trip; a second for arms whose kept runs are gone (or none were kept).
    """
    low = "-" if since is None else f"{max(0, int(since * 1000))}-0"
    keys: list[_Key] = [(role, config, arm, low, record.version if record else 0,
                         record.updated_at if record else 0.0) for config, arm, record in asks]
    arms = _kept.setdefault(traces, OrderedDict())
    kept: list[tuple[Scored, ...]] = [arms.get(key, ()) for key in keys]
    streams = [stream_key(role, config, arm) for config, arm, _ in asks]
    fresh: list[StreamEntries] = [[] for _ in asks]
    with _redis_errors():
        pipe = traces.connection.pipeline(transaction=False)
        for stream, mine in zip(streams, kept):
            if mine:
                newest, oldest = mine[0][0].decode(), mine[-1][0].decode()
                pipe.xrevrange(stream, max="+", min="(" + newest, count=SAMPLE)
                pipe.xrange(stream, min=newest, max=newest)
                pipe.xrange(stream, min=oldest, max=oldest)
            else:
                pipe.xrevrange(stream, max="+", min=low, count=SAMPLE)
        answers = iter(cast(list[StreamEntries], pipe.execute()))
        whole = []
        for i, mine in enumerate(kept):
            fresh[i] = next(answers)
            if mine and not (next(answers) and next(answers)):
                whole.append(i)  # the stream was trimmed past them, or written anew
                kept[i] = ()
        if whole:
            pipe = traces.connection.pipeline(transaction=False)
            for i in whole:
                pipe.xrevrange(streams[i], max="+", min=low, count=SAMPLE)
            for i, entries in zip(whole, cast(list[StreamEntries], pipe.execute())):
                fresh[i] = entries
    out = []
    for key, (_, _, record), new, mine in zip(keys, asks, fresh, kept):
        criteria = list(record.criteria) if record is not None else []
        runs = (*(_scored(entry_id, fields, criteria) for entry_id, fields in new),
                *mine)[:SAMPLE]
        arms[key] = runs
        arms.move_to_end(key)
        out.append([(job, verdicts) for _, job, verdicts in reversed(runs)])
    while len(arms) > ARMS_KEPT:
        arms.popitem(last=False)
    return out


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
