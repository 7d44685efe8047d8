"""Drift detectors kept in Redis, advanced over the runs that arrived since the last read.

Keys (the role is the Redis Cluster hash tag, so one arm's detectors share a
slot and one script saves them together)::

    rolegate:{role}:drift:{config}:{arm}:{epoch}:{metric}   hash: one Detector

`epoch` is the stage's window epoch (`gatekeeper.store.traces.epoch_of`): a new stage
or canary step starts fresh detectors under new keys, and the old ones expire
`ttl_s` after their last save. Fields: p0, shift, h, reference (the p0's
detector parameters), n, events, s, alarms, first_alarm_at, first_alarm_id and
last, the id of the last stream entry counted ("" before the first).

A read loads an arm's detectors, reads the stream entries after the oldest
`last` (XRANGE with an exclusive start, at most `max_advance` of them: a
detector far behind catches up over successive reads, and says so), advances
each and saves them all in one script that first checks every key's `last` is
still the one read. When another reader got there first, nothing is written
and that reader's state is shown instead: two readers never count a run twice.
Entries trimmed from a capped stream before a detector read them are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bindings.connection import Connection
from bindings.store import _redis_errors
from gatekeeper.stats.drift import Detector, Params, stream_order
from gatekeeper.stats.pairing import Run
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import WINDOW_TTL_S
from rolegate.trace import canonical_tools

DRIFT_KEY_TEMPLATE = "rolegate:{{{role}}}:drift:{config}:{arm}:{epoch}:{metric}"

#: Most stream entries one arm's detectors advance over per read: bounds a read.
MAX_ADVANCE = 5_000
#: Detector state outlives its last save as long as the stage's aggregate does.
DRIFT_TTL_S = WINDOW_TTL_S

# KEYS: one detector hash per detector to save
# ARGV: ttl, then per key: the `last` it was read with ("" for none), the number of
#       field/value items that follow, then those items
# Writes all or nothing; returns 1 when written, 0 when any key's `last` moved.
_SAVE = """
local at = 2
for k = 1, #KEYS do
  local last = redis.call('HGET', KEYS[k], 'last') or ''
  if last ~= ARGV[at] then return 0 end
  at = at + 2 + tonumber(ARGV[at + 1])
end
at = 2
for k = 1, #KEYS do
  local count = tonumber(ARGV[at + 1])
  redis.call('HSET', KEYS[k], unpack(ARGV, at + 2, at + 1 + count))
  redis.call('EXPIRE', KEYS[k], ARGV[1])
  at = at + 2 + count
end
return 1
"""


def drift_key(role: str, config: str, arm: str, epoch: str, metric: str) -> str:
    """The hash holding one detector of (role, config, arm) over one stage."""
    return DRIFT_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch,
                                     metric=metric)


def run_of_fields(fields: Mapping[bytes, bytes]) -> Run:
    """The pairing/drift view of one stream entry (t: trace JSON, v: verdict JSON).

    Plain JSON, not the pydantic models: the trace was validated on ingest, and
    readers go through thousands of these.
    """
    trace = json.loads(fields[b"t"])
    verdict = json.loads(fields[b"v"])
    steps = trace.get("steps") or ()
    if verdict.get("judged") is False:
        # An unjudged run is neither a pass nor a failure: keyless, it is never
        # paired, and as a pass it raises no drift alarm (it is counted apart).
        return Run(key="", passed=True)
    # The trajectory, not the raw tools: a parallel group compares as a set.
    return Run(key=str(trace.get("key", "")), passed=bool(verdict["passed"]),
               tools=canonical_tools(trace.get("tools", ()),
                                     [step.get("parallel_group") for step in steps]),
               tool_error=int(trace.get("tool_errors", 0)) > 0,
               forbidden_call=bool(verdict.get("forbidden")))


@dataclass(frozen=True)
class Watch:
    """One arm to watch: its stream, when its stage began, and p0 etc. per metric."""

    config: str
    arm: str
    since: float | None
    wanted: Mapping[str, Params]


@dataclass(frozen=True)
class Advanced:
    """One arm's detectors after a read, and whether they have read all there was."""

    detectors: dict[str, Detector]
    caught_up: bool


class DriftStates:
    """Loads, advances and saves (compare-and-set) the detectors of a role's arms."""

    def __init__(self, connection: Connection, *, max_advance: int = MAX_ADVANCE,
                 ttl_s: int = DRIFT_TTL_S) -> None:
        self.connection = connection
        self.max_advance = max_advance
        self.ttl_s = ttl_s
        self._save = connection.register_script(_SAVE)

    def load(self, role: str, epoch: str, watches: Sequence[Watch]) -> list[dict[str, Detector]]:
        """The stored detectors of each watch's metrics (absent ones left out), one round trip."""
        keys = [(w, drift_key(role, w.config, w.arm, epoch, m)) for w in watches for m in w.wanted]
        if not keys:
            return [{} for _ in watches]
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for _, key in keys:
                pipe.hgetall(key)
            raws = iter(pipe.execute())
        out: list[dict[str, Detector]] = []
        for watch in watches:
            found: dict[str, Detector] = {}
            for metric in watch.wanted:
                raw = next(raws)
                if raw:
                    found[metric] = detector_from_fields(metric, raw)
            out.append(found)
        return out

    def advance(self, role: str, epoch: str, watches: Sequence[Watch]) -> list[Advanced]:
        """Each watch's detectors advanced over the entries they have not counted yet.

        Three round trips whatever the number of arms: load, read, save. A
        detector missing, or `outdated` against the watch's parameters, starts
        afresh at the stage's first entry.
        """
        stored = self.load(role, epoch, watches)
        starts: list[dict[str, Detector]] = []
        for watch, found in zip(watches, stored):
            starts.append({
                metric: found[metric]
                if metric in found and not found[metric].outdated(params)
                else Detector(metric, params)
                for metric, params in watch.wanted.items()})
        batches = self._read(role, watches, starts)
        moved = [{m: d.advance(entries) for m, d in start.items()}
                 for start, entries in zip(starts, batches)]
        lost = self._store(role, epoch, watches, stored, moved)
        if lost:
            # Another reader saved first: show its state, which counted the same runs.
            again = self.load(role, epoch, [watches[i] for i in lost])
            for i, found in zip(lost, again):
                moved[i] = {m: found.get(m, d) for m, d in moved[i].items()}
        return [Advanced(detectors, len(entries) < self.max_advance)
                for detectors, entries in zip(moved, batches)]

    def _read(self, role: str, watches: Sequence[Watch],
              starts: Sequence[dict[str, Detector]]) -> list[list[tuple[str, Run]]]:
        """Per watch, the stream entries after its least advanced detector, oldest first."""
        wanted = [i for i, start in enumerate(starts) if start]
        out: list[list[tuple[str, Run]]] = [[] for _ in watches]
        if not wanted:
            return out
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for i in wanted:
                watch = watches[i]
                behind = min((d.last_id for d in starts[i].values()), key=stream_order)
                if behind:
                    low = f"({behind}"
                elif watch.since is None:
                    low = "-"
                else:
                    low = f"{max(0, int(watch.since * 1000))}-0"
                pipe.xrange(stream_key(role, watch.config, watch.arm), min=low, max="+",
                            count=self.max_advance)
            answers = pipe.execute()
        for i, entries in zip(wanted, answers):
            out[i] = [(_text(entry_id), run_of_fields(fields)) for entry_id, fields in entries]
        return out

    def _store(self, role: str, epoch: str, watches: Sequence[Watch],
               stored: Sequence[dict[str, Detector]],
               moved: Sequence[dict[str, Detector]]) -> list[int]:
        """Save every changed watch with a compare-and-set; the watches that lost the race."""
        calls: list[tuple[int, list[str], list[Any]]] = []
        for i, (watch, before, after) in enumerate(zip(watches, stored, moved)):
            changed = [d for m, d in after.items() if before.get(m) != d]
            if not changed:
                continue
            keys = [drift_key(role, watch.config, watch.arm, epoch, d.metric) for d in changed]
            args: list[Any] = [self.ttl_s]
            for detector in changed:
                old = before.get(detector.metric)
                items = [x for pair in detector_fields(detector).items() for x in pair]
                args += [old.last_id if old is not None else "", len(items), *items]
            calls.append((i, keys, args))
        if not calls:
            return []
        with _redis_errors():
            try:
                answers = self._evalsha(calls)
            except redis.exceptions.NoScriptError:
                # The server lost its script cache: a NOSCRIPT answer ran nothing.
                self._save.sha = self.connection.script_load(_SAVE)
                answers = self._evalsha(calls)
        return [i for (i, _, _), saved in zip(calls, answers) if int(saved) != 1]

    def _evalsha(self, calls: list[tuple[int, list[str], list[Any]]]) -> list[Any]:
        # evalsha in a plain pipeline: redis-py's Script in a pipeline would ask
        # SCRIPT EXISTS first, one more round trip per read.
        pipe = self.connection.pipeline(transaction=False)
        for _, keys, args in calls:
            # EVALSHA as a plain command: a Cluster pipeline refuses pipe.evalsha().
            pipe.execute_command("EVALSHA", self._save.sha, len(keys), *keys, *args)
        answers: list[Any] = pipe.execute()
        return answers


def detector_fields(detector: Detector) -> dict[str, str]:
    """A detector as its hash stores it (floats in repr: they read back exactly)."""
    p = detector.params
    return {"p0": repr(p.p0), "shift": repr(p.shift), "h": repr(p.h),
            "reference": str(p.reference), "derived": "1" if p.derived else "",
            "observed": "" if p.observed is None else repr(p.observed), "n": str(detector.n),
            "events": str(detector.events), "s": repr(detector.s),
            "alarms": str(detector.alarms),
            "first_alarm_at": "" if detector.first_alarm_at is None
            else str(detector.first_alarm_at),
            "first_alarm_id": detector.first_alarm_id or "", "last": detector.last_id}


def detector_from_fields(metric: str, raw: Mapping[Any, Any]) -> Detector:
    """Read a detector back from its hash (HGETALL answer)."""
    f = {_text(k): _text(v) for k, v in raw.items()}
    observed = f.get("observed", "")
    params = Params(p0=float(f["p0"]), shift=float(f["shift"]), h=float(f["h"]),
                    reference=int(f["reference"]),
                    observed=float(observed) if observed else None,
                    derived=f.get("derived") == "1")
    first_at = f.get("first_alarm_at", "")
    return Detector(metric, params, n=int(f["n"]), events=int(f["events"]), s=float(f["s"]),
                    alarms=int(f["alarms"]), first_alarm_at=int(first_at) if first_at else None,
                    first_alarm_id=f.get("first_alarm_id") or None, last_id=f.get("last", ""))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
