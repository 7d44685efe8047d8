"""Reports matched to their own assignments: which runs are missing, run by run. Pure.

A run resolved by a current SDK or over HTTP carries the id its resolve minted
(`rolegate.run_ids`); its trace, reported under that id, removes the id from
its reporter's pending set as it is stored (`gatekeeper.store.run_matches`).
So for a reporter whose runs carry ids, a run is missing exactly when its own
id is still pending once its assignment's bucket is past the grace: whenever
its report comes, however its start and its resolve straddle a bucket edge,
and a report of another run never stands in for it. A candidate whose reports
are merely slower than current's has nothing missing until the grace has
passed; until then the buckets holding its runs in flight wait
(`gatekeeper.stats.missing`: a cell enters once, after them).

Runs without ids (an SDK from before ids, a caller that sends counts only, or
one that resolves over HTTP but reports under run ids of its own) keep the
bucket arithmetic of `gatekeeper.stats.missing`: assigned against reported per
report bucket, the next bucket's surplus covering a shortfall. Both kinds mix
per (reporter, arm, bucket): the runs not known to be reported (pending ids,
and assignments counted without ids) are set against the reports that matched
no id's shape (plain run ids), by that arithmetic. A report under a minted id
that matched nothing (another token's id, an earlier stage's) covers nothing.

`matched_reports` turns one reporter's figures into the "reported" per bucket
the report-rate test and the missing-runs policy already read: assigned minus
missing. Each reporter's ids are its own (the pending set is per reporter), so
issue 33's rule holds: a token's assignments are set against its own reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.stats.missing import REPORT_BUCKET_S
from rolegate.run_ids import PREFIX, is_minted
from rolegate.trace import Trace

#: bucket -> count.
Buckets = Mapping[int, int]
#: Window fields: runs that arrived, per report bucket (30 s, the exposures' own: not
#: `concurrent.BUCKET_S`) of their start ...
REPORTED = "rep:"
#: ... and of those, the runs reported under an id minted at assignment: matched to their
#: own assignment, they never cover another run's missing report.
ID_REPORTED = "rid:"


def reported_names(trace: Trace) -> tuple[str, ...]:
    """The window fields saying `trace`'s run arrived, each adding 1
    (`gatekeeper.window_fields`): its start's report bucket, under ID_REPORTED too when
    its run id was minted at assignment; none without a time."""
    bucket = report_bucket(trace)
    if bucket is None:
        return ()
    if id_minted(trace):
        return f"{REPORTED}{bucket}", f"{ID_REPORTED}{bucket}"
    return (f"{REPORTED}{bucket}",)


def report_bucket(trace: Trace) -> int | None:
    """The report bucket of `trace`'s start (None without a time): `reported_names`'s number."""
    if trace.time is None:
        return None
    return int((trace.time - trace.latency_s) // REPORT_BUCKET_S)


def id_minted(trace: Trace) -> bool:
    """Whether `trace`'s run id was minted at assignment (it counts under ID_REPORTED too)."""
    return trace.run_id.startswith(PREFIX) and is_minted(trace.run_id)


@dataclass(frozen=True)
class RunIds:
    """One reporter's runs of one arm that carry ids (`run_matches.Matches`' figures)."""

    #: bucket -> runs assigned with an id.
    ids: Buckets
    #: bucket -> of those, past the grace and never reported (settled ones included).
    missing: Buckets
    #: Runs within the grace not reported yet, and the bucket of the oldest.
    in_flight: int = 0
    first_in_flight: int | None = None


def matched_reports(assigned: Buckets, reported: Buckets, id_reported: Buckets,
                    runs: RunIds | None, mature: int) -> dict[int, int]:
    """One reporter's reported runs per bucket as the report test reads them (assigned
    minus missing), its ids matched run by run and the rest by bucket arithmetic.

    `reported` counts every arriving run by its start's bucket, `id_reported` those under
    a minted id; `mature` is the first bucket still in its grace. Without `runs` (no ids)
    this is `reported` itself: the arithmetic of `gatekeeper.stats.missing`.
    """
    if runs is None:
        return dict(reported)
    ids, pending = runs.ids, runs.missing
    plain_reported = {b: max(0, int(n) - int(id_reported.get(b, 0)))
                      for b, n in reported.items()}

    def unknown(bucket: int) -> int:
        # The bucket's runs not known to be reported: counted without an id, or (past
        # the grace) pending; within the grace every id'd run may still be in flight.
        plain = max(0, int(assigned.get(bucket, 0)) - int(ids.get(bucket, 0)))
        held = pending.get(bucket, 0) if bucket < mature else ids.get(bucket, 0)
        return plain + min(int(held), int(ids.get(bucket, 0)))

    out: dict[int, int] = {}
    for bucket, n in assigned.items():
        n = int(n)
        later = plain_reported.get(bucket + 1, 0) - unknown(bucket + 1)
        if bucket < mature:
            short = max(0, unknown(bucket) - plain_reported.get(bucket, 0) - max(0, later))
        else:
            plain = max(0, n - int(ids.get(bucket, 0)))
            short = max(0, plain - plain_reported.get(bucket, 0) - max(0, later))
            if bucket == runs.first_in_flight:
                short = max(short, 1)  # its cell waits for the runs in flight
        out[bucket] = max(0, n - short)
    return out


def run_figures(by_reporter: Mapping[str, RunIds], mature: int,
                counted: set[str] | None = None) -> dict[str, Any]:
    """JSON-ready totals of an arm's runs with ids over the buckets past the grace:
    `with_id`, `matched`, `missing` (of the `counted` reporters when given), and
    `in_flight` (every reporter's runs within the grace, unreported)."""
    with_id = missing = in_flight = 0
    for name, runs in by_reporter.items():
        in_flight += runs.in_flight  # every reporter's: none has a verdict on them yet
        if counted is not None and name not in counted:
            continue
        mature_ids = sum(int(n) for b, n in runs.ids.items() if b < mature)
        gone = sum(min(int(m), int(runs.ids.get(b, 0)))
                   for b, m in runs.missing.items() if b < mature)
        with_id += mature_ids
        missing += gone
    return {"with_id": with_id, "matched": with_id - missing, "missing": missing,
            "in_flight": in_flight}
