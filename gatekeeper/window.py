"""A window of traces folded into counts: mergeable, and storable as one Redis hash.

The canonical form is a flat `{field: int}` map, the same one the trace store
keeps with HINCRBY, so a window built in memory from a list of traces (the
offline suite) and one read back from Redis (the online gate) are the same
object, computed by the same code (one extractor, so the lanes cannot drift
apart). Adding a trace only ever adds integers, so windows merge by summing.

Fields (`gatekeeper.window_fields`, where a trace's increments are extracted): the
scalars in `SCALARS`, and counters under a prefix: `crit_n:<key>`
and `crit_pass:<key>` per criterion, `steps:<count>` and `cost:<micro-USD
bucket>` histograms, `rep:<time bucket>` runs that arrived per bucket of their
start, `lat:<ms bucket>` the latency histogram, `lag:<bucket>` each run's report lag
from its start, `tool:<name>` calls, `forbid:<name>` traces that called a forbidden
tool, `lost:<name>` traces that lost a required tool; and per (time bucket of the
run's *start*, stratum) `cn:<bucket>:<stratum>` runs, `cf:` failed runs, `ce:` runs
with a tool error and `cx:` runs with a forbidden call, what the candidate is
compared with concurrent current on (`gatekeeper.stats.concurrent`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from bindings.models import Invariants
from gatekeeper.checks.invariants import CRITERIA, TraceVerdict, check
from gatekeeper.stats.matching import REPORTED
from gatekeeper.stats.statistics import histogram_percentile

# Read from here by the gate and its tests (they were defined here).
from gatekeeper.window_fields import CELL_EVENTS as CELL_EVENTS
from gatekeeper.window_fields import CELL_N as CELL_N
from gatekeeper.window_fields import CLASHES as CLASHES
from gatekeeper.window_fields import (
    COST,
    CRIT_N,
    CRIT_PASS,
    FORBID,
    JSON_COUNTS,
    LATENCY,
    LOST,
    MICROS,
    STEPS,
    TOKENS,
)
from gatekeeper.window_fields import LAG as LAG
from gatekeeper.window_fields import TOOL as TOOL
from gatekeeper.window_fields import cost_bucket as cost_bucket
from gatekeeper.window_fields import increments as increments
from rolegate.trace import Trace


class WindowStats:
    """Running aggregate of trace verdicts over one (role, config, arm) window."""

    __slots__ = ("_cells", "_closed", "_fields", "_index", "_merged")

    def __init__(self, fields: Mapping[str, int] | None = None) -> None:
        self._fields: Counter[str] = Counter(fields or {})
        # Cells kept apart (`of_counts`), added to `_fields`' at each read; those sums.
        self._closed: Any = None
        self._merged: dict[str, dict[str, int]] = {}
        # The fields grouped by prefix, and the cells, built at the first read that
        # needs them: a 100,000-run window has some 20,000 fields, and the gate
        # view reads a dozen prefixes of each of its windows.
        self._index: dict[str, dict[str, int]] | None = None
        self._cells: dict[str, dict[tuple[int, str], tuple[int, int]]] | None = None

    @property
    def fields(self) -> Counter[str]:
        """The flat counts. Reading them drops what was built from them (the caller may
        change them): readers inside the class use `_fields`."""
        self._whole()
        self._index = self._cells = None
        return self._fields

    def _whole(self) -> Counter[str]:
        """`_fields` with the cells kept apart added in (once: then they are part of it)."""
        if self._closed is not None:
            fields = self._fields
            for head, group in self._closed.groups.items():
                for rest, value in group.items():
                    fields[f"{head}:{rest}"] += value
            self._closed, self._merged, self._index, self._cells = None, {}, None, None
        return self._fields

    # -- building --------------------------------------------------------------

    @classmethod
    def from_traces(cls, traces: Iterable[Trace], invariants: Invariants) -> WindowStats:
        """Check each trace against `invariants` and fold the verdicts in."""
        window = cls()
        for trace in traces:
            window.add(trace, check(trace, invariants))
        return window

    @classmethod
    def from_fields(cls, raw: Mapping[Any, bytes | str | int]) -> WindowStats:
        """Rebuild a window from a stored hash (HGETALL answer: bytes or str)."""
        fields: dict[str, int] = {}
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else key
            fields[name] = int(value)
        return cls(fields)

    @classmethod
    def of_counts(cls, fields: Counter[str], closed: Any = None) -> WindowStats:
        """A window over `fields` itself, not a copy: for a reader's own fresh counts (a
        100,000-run window holds ~15,000 fields, and copying them cost a view ~2 ms each).
        `closed`: cells kept apart (`store.window_closed.ClosedCells`), counted as fields."""
        window = cls.__new__(cls)
        window._fields, window._index, window._cells = fields, None, None
        window._closed, window._merged = closed, {}
        return window

    def add(self, trace: Trace, verdict: TraceVerdict) -> None:
        """Fold one checked trace into the window."""
        self.fields.update(increments(trace, verdict))

    def merge(self, other: WindowStats) -> WindowStats:
        """A new window holding both windows' traces."""
        return WindowStats(self._whole() + other._whole())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WindowStats):
            return NotImplemented
        return +self._whole() == +other._whole()

    def __repr__(self) -> str:
        return f"WindowStats(n={self.n}, passes={self.passes})"

    # -- reading ---------------------------------------------------------------

    def _get(self, name: str) -> int:
        return self._fields.get(name, 0)

    def _grouped(self) -> dict[str, dict[str, int]]:
        """{prefix before its first colon: {rest of the name: value}}, in field order."""
        if self._index is None:
            index: dict[str, dict[str, int]] = {}
            fields = self._fields
            # One pass, the names split at C speed: ~15,000 fields in a 100,000-run window.
            for (head, colon, rest), value in zip(map(str.partition, fields, repeat(":")),
                                                  fields.values()):
                if colon:
                    try:
                        index[head][rest] = value
                    except KeyError:
                        index[head] = {rest: value}
            self._index = index
        return self._index

    def _group(self, prefix: str) -> dict[str, int]:
        """The fields under `prefix` (one colon, at its end) by the rest of their name."""
        head = prefix[:-1]
        group = self._grouped().get(head, {})
        apart: dict[str, int] = {} if self._closed is None else self._closed.groups.get(head, {})
        merged = self._merged.get(head) if apart else group
        if merged is None:
            merged = dict(apart)
            for rest, value in group.items():
                merged[rest] = merged.get(rest, 0) + value
            self._merged[head] = merged
        return merged

    def _prefixed(self, prefix: str) -> dict[str, int]:
        """{name less `prefix`: value} of the non-zero fields under `prefix`."""
        return {k: v for k, v in self._group(prefix).items() if v}

    @property
    def n(self) -> int:
        """Traces in the window."""
        return self._get("n")

    @property
    def passes(self) -> int:
        """Traces whose every configured invariant held."""
        return self._get("passes")

    @property
    def forbidden(self) -> int:
        """Traces that called at least one forbidden or out-of-allowlist tool."""
        return self._get("forbidden")

    @property
    def blocking(self) -> int:
        """Traces with a zero-tolerance breach (forbidden call or lost required tool)."""
        return self._get("blocking")

    @property
    def clashes(self) -> int:
        """Traces stored under a run id another reporter had sent first (`store.trace_ingest`)."""
        return self._get(CLASHES)

    @property
    def unjudged(self) -> int:
        """Runs whose record said nothing the gate can judge (not in `n`)."""
        return self._get("unjudged")

    @property
    def calls(self) -> int:
        """Tool calls (steps) over all traces."""
        return self._get("calls")

    @property
    def tool_errors(self) -> int:
        """Tool calls that returned an error."""
        return self._get("tool_errors")

    @property
    def error_runs(self) -> int:
        """Traces with at least one failed tool call."""
        return self._get("error_runs")

    @property
    def answered(self) -> int:
        """Traces that ended with an answer."""
        return self._get("answered")

    @property
    def cost_usd(self) -> float:
        """Total cost of the window's traces."""
        return self._get("cost_micros") / MICROS

    @property
    def tokens(self) -> int:
        """Total tokens."""
        return self._get("tokens")

    @property
    def latency_s(self) -> float:
        """Total latency."""
        return self._get("latency_ms") / 1000

    def criterion_counts(self) -> dict[str, tuple[int, int]]:
        """{criterion: (passes, judged)} for each criterion judged at least once."""
        judged = self._prefixed(CRIT_N)
        passed = self._prefixed(CRIT_PASS)
        order = {name: i for i, name in enumerate(CRITERIA)}
        names = sorted(judged, key=lambda name: (order.get(name, len(order)), name))
        return {name: (passed.get(name, 0), judged[name]) for name in names}

    def reported_buckets(self, prefix: str = REPORTED) -> dict[int, int]:
        """{time bucket of the run's start: runs that arrived} (under minted ids: ID_REPORTED)."""
        return {int(k): v for k, v in self._group(prefix).items() if v}

    def lag_histogram(self) -> dict[int, int]:
        """{`units.lag_bucket` of (report arrival - run start): runs}."""
        return {int(k): v for k, v in self._prefixed(LAG).items()}

    def cells(self, metric: str) -> dict[tuple[int, str], tuple[int, int]]:
        """{(bucket, stratum): (runs, runs with `metric`'s event)} for the concurrent test."""
        return self.all_cells()[metric]

    def all_cells(self) -> dict[str, dict[tuple[int, str], tuple[int, int]]]:
        """`cells` of every metric, read in one pass over the fields.

        Kept with the window: read them, don't change them.
        """
        if self._cells is None:
            runs = self._group(CELL_N)
            keys = {}
            for cell in runs:
                bucket, _, stratum = cell.partition(":")
                keys[cell] = (int(bucket), stratum)
            self._cells = {}
            for metric, prefix in CELL_EVENTS.items():
                mine = self._group(prefix)
                self._cells[metric] = {keys[cell]: (n, mine.get(cell, 0))
                                       for cell, n in runs.items()}
        return self._cells

    def cell_fields(self) -> dict[str, dict[str, int]]:
        """The cells' counts as stored: per prefix (`CELL_N`, then `CELL_EVENTS`'),
        {"<bucket>:<stratum>": count}. Kept with the window: read them, don't change them.
        """
        return {prefix: self._group(prefix) for prefix in (CELL_N, *CELL_EVENTS.values())}

    def cell_parts(self) -> tuple[str | None, dict[str, dict[str, int]]]:
        """(the id of the cells kept apart or None, the others as `cell_fields` gives them)."""
        groups = self._grouped()
        gen = None if self._closed is None else self._closed.gen
        return gen, {prefix: groups.get(prefix[:-1], {})
                     for prefix in (CELL_N, *CELL_EVENTS.values())}

    def latency_histogram(self) -> dict[float, int]:
        """{latency bucket upper bound in seconds: runs} (runs that reported a latency)."""
        return {int(k) / 1000: v for k, v in self._prefixed(LATENCY).items()}

    def tokens_histogram(self) -> dict[float, int]:
        """{tokens bucket upper bound: runs} (runs that reported tokens)."""
        return {float(k): v for k, v in self._prefixed(TOKENS).items()}

    def steps_histogram(self) -> dict[int, int]:
        """{step count: traces}."""
        return {int(k): v for k, v in self._prefixed(STEPS).items()}

    def cost_histogram(self) -> dict[float, int]:
        """{cost bucket upper bound in USD: traces}."""
        return {int(k) / MICROS: v for k, v in self._prefixed(COST).items()}

    def tool_tally(self) -> dict[str, int]:
        """{tool: calls}, most called first (observe before you forbid)."""
        return dict(sorted(self._prefixed(TOOL).items(), key=lambda kv: (-kv[1], kv[0])))

    def forbidden_tools(self) -> dict[str, int]:
        """{tool: traces that called it while it was forbidden or off the allowlist}."""
        return dict(sorted(self._prefixed(FORBID).items()))

    def required_lost(self) -> dict[str, int]:
        """{required tool: traces that never called it}."""
        return dict(sorted(self._prefixed(LOST).items()))

    def p95_steps(self) -> float:
        """Nearest-rank 95th percentile of step counts; 0 when empty."""
        return histogram_percentile({float(k): v for k, v in self.steps_histogram().items()},
                                    0.95)

    def p95_cost_usd(self) -> float:
        """95th percentile of cost, as its histogram bucket's upper bound; 0 when empty."""
        return histogram_percentile(self.cost_histogram(), 0.95)

    def p99_cost_usd(self) -> float:
        """99th percentile of cost (the winsorizing cap); 0 when empty."""
        return histogram_percentile(self.cost_histogram(), 0.99)

    def mean_cost_usd(self) -> float:
        """Mean cost per trace; 0 when empty."""
        return self.cost_usd / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        """The raw counts, JSON-ready."""
        return {**{name: getattr(self, name) for name in JSON_COUNTS},
                "steps_histogram": {str(k): v for k, v in sorted(self.steps_histogram().items())}}
