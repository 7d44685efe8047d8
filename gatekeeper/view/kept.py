"""The `concurrent` and `reports` sections, kept between gate views while their inputs stand.

Both sections are functions of the counts of *closed* time buckets alone (the
concurrent cells below `closed_before` (the report horizon's bucket), the assignments and reports below
`mature_before`; and for `concurrent`, the missing runs it counts as failed
under the `missing_runs` policy, themselves from mature buckets), the binding
and the bucket settings: the same inputs give the same section. Computing them
afresh reads every cell of the stage (6,700 cells per metric at 1 job/s over
100,000 runs, about 3,300 buckets of assignments), most of a 100,000-run view's
time, for an answer that moves only as buckets close.

So each `TraceStore` keeps, per role, stage, binding version and section, the
last answer with the bound and the closed counts it was computed from (the
stored fields, by name). A view whose bound is the same and whose closed counts
equal the kept ones gets the kept answer; anything else (a bucket closed, a
late run landing in a closed bucket, a new binding version) is computed afresh
and kept. The check is a subset test of the kept counts against the window's,
at C speed; only names not kept are parsed, to see they are open buckets. The
cells of long-closed buckets a window keeps apart (`gatekeeper.store.window_closed`)
are not compared one by one: their id names them (a move into them, by any
process, gives them a new id).
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from gatekeeper.stats import concurrent as cells
from gatekeeper.stats.missing import Missing, mature_before
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.concurrent import closing_of, concurrent_section
from gatekeeper.view.context import GateContext
from gatekeeper.view.reports import ReportCounts, report_wait, reports_section

#: Sections kept per trace store (the least recently read dropped first).
SECTIONS_KEPT = 256

K = TypeVar("K")
A = TypeVar("A")


@dataclass(frozen=True)
class _Kept:
    """One section's answer and what it was computed from."""

    bound: int
    extra: Any
    closed: tuple[dict[Any, int], ...]
    answer: Any


_kept: weakref.WeakKeyDictionary[TraceStore, OrderedDict[Hashable, _Kept]] = (
    weakref.WeakKeyDictionary())


def concurrent(ctx: GateContext, missing: Missing | None = None) -> dict[str, Any] | None:
    """`view.concurrent.concurrent_section`, kept while no cell below `closed_before` changed
    (and the missing runs it counts, `view.reports.missing_for`, are the same)."""
    # A window's cells kept apart (`store.window_closed`) are named by their id:
    # the same id, the same counts. Only the cells still in the window hash are compared.
    groups: list[dict[str, int]] = []
    closed_ids: list[str | None] = []
    for _, window in ctx.arms.values():
        closed_id, parts = window.cell_parts()
        closed_ids.append(closed_id)
        groups += parts.values()
    closed = closing_of(ctx)
    found = _section(ctx, ("concurrent", cells.BUCKET_S, cells.GRACE_S),
                     (missing, tuple(closed_ids)),
                     cells.closed_before(ctx.now) if closed is None else closed.before,
                     groups, _cell_bucket, lambda: concurrent_section(ctx, missing))
    if found is not None and closed is not None:
        found.update(closed.as_dict())  # the horizon of this read, not the kept one's
    return found


def reports(ctx: GateContext, counts: ReportCounts | None) -> dict[str, Any] | None:
    """`view.reports.reports_section`, kept while no count below `mature_before` changed."""
    if counts is None:
        return None
    # Four groups (each arm's assigned and reported), keyed by (reporter, bucket).
    groups: list[dict[tuple[str, int], int]] = [{}, {}, {}, {}]
    for name, arms in counts.items():
        for i, part in enumerate((arms[0][0], arms[0][1], arms[1][0], arms[1][1])):
            groups[i].update(((name, bucket), n) for bucket, n in part.items())
    return _section(ctx, ("reports", cells.BUCKET_S), None,
                    mature_before(ctx.now, report_wait(ctx)),
                    groups, _second, lambda: reports_section(ctx, counts))


def _second(key: tuple[str, int]) -> int:
    """The time bucket of a (reporter, bucket) count."""
    return key[1]


def _cell_bucket(name: str) -> int:
    """The time bucket of a stored cell name ("<bucket>:<stratum>")."""
    return int(name.partition(":")[0])


def _section(ctx: GateContext, what: tuple[Hashable, ...], extra: Any, bound: int,
             groups: Sequence[Mapping[K, int]], bucket_of: Callable[[K], int],
             compute: Callable[[], A]) -> A:
    """The kept answer when `extra`, `bound` and the closed part of each group are as kept;
    else compute."""
    sections = _kept.setdefault(ctx.traces, OrderedDict())
    key = (*what, ctx.role, ctx.epoch, ctx.record.version)
    kept = sections.get(key)
    if (kept is not None and kept.bound == bound and kept.extra == extra
            and all(_unchanged(closed, group, bucket_of, bound)
                    for closed, group in zip(kept.closed, groups))):
        sections.move_to_end(key)
        answer: A = copy.deepcopy(kept.answer)  # the view's sections are the caller's to change
        return answer
    answer = compute()
    closed = tuple({name: n for name, n in group.items() if bucket_of(name) < bound}
                   for group in groups)
    sections[key] = _Kept(bound, copy.deepcopy(extra), closed, copy.deepcopy(answer))
    sections.move_to_end(key)
    while len(sections) > SECTIONS_KEPT:
        sections.popitem(last=False)
    return answer


def _unchanged(closed: Mapping[K, int], group: Mapping[K, int], bucket_of: Callable[[K], int],
               bound: int) -> bool:
    """True when `group`'s counts below `bound` are exactly `closed`."""
    if not closed.items() <= group.items():
        return False
    return len(group) == len(closed) or all(bucket_of(name) >= bound
                                            for name in group.keys() - closed.keys())
