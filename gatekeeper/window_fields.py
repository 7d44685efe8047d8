"""The window fields one trace adds: the one extractor both lanes fold traces with.

A trace adds integers to flat `{field: int}` counts (`gatekeeper.window`, which
reads them back): the scalars in `SCALARS`, and counters under the prefixes
below. `increments` gives one trace's; `Increments` sums many traces' at once,
as ingest stores a batch's group of traces in one script call.
"""

from __future__ import annotations

from collections import Counter

from gatekeeper.checks.invariants import KEPT_NAMES, TraceVerdict
from gatekeeper.stats.concurrent import bucket_of
from gatekeeper.stats.matching import ID_REPORTED, REPORTED, id_minted, report_bucket
from gatekeeper.stats.units import lag_bucket
from rolegate.trace import Trace

#: Scalar fields: traces, passes, traces with a forbidden call, blocking traces,
#: answered runs, tool calls, failed calls, runs with a failed call, micro-USD,
#: tokens, milliseconds of latency; and runs whose record said nothing the gate can
#: judge (`unjudged`: counted apart, in no other field, never a pass).
SCALARS = ("n", "passes", "forbidden", "blocking", "answered", "calls", "tool_errors",
           "error_runs", "cost_micros", "tokens", "latency_ms", "unjudged")
CRIT_N = "crit_n:"
CRIT_PASS = "crit_pass:"
STEPS = "steps:"
COST = "cost:"
TOOL = "tool:"
FORBID = "forbid:"
LOST = "lost:"
#: Latency histogram: milliseconds rounded up to COST_DIGITS significant digits.
LATENCY = "lat:"
#: Tokens histogram, rounded up to COST_DIGITS significant digits.
TOKENS = "tok:"
#: Seconds from a run's start to its report's arrival, in `units.lag_bucket`s (the horizon).
LAG = "lag:"
#: Not an increment of a trace: the ingest script counts run-id clashes into the window.
CLASHES = "clashes"
#: Per (bucket, stratum) counters: runs, and runs with each metric's event.
CELL_N = "cn:"
CELL_EVENTS = {"run_failure": "cf:", "tool_error": "ce:", "forbidden_call": "cx:"}

#: The counts `to_json` gives, in its order.
JSON_COUNTS = ("n", "passes", "forbidden", "blocking", "answered", "calls", "tool_errors",
               "error_runs", "cost_usd", "tokens", "unjudged")
MICROS = 1_000_000
#: Cost histogram resolution: significant digits kept (rounded up), so a p95 read
#: from it overstates the true value by under 1% and the field count stays small.
COST_DIGITS = 3


#: The scalars a trace adds its own value to (every other field it adds 1 to).
VALUED = ("tool_errors", "calls", "cost_micros", "tokens", "latency_ms")
#: The fields a verdict alone decides, by verdict (its `json_text`): most of a role's runs
#: share a handful of verdicts.
_VERDICT_FIELDS: dict[str, tuple[str, ...]] = {}
_VERDICT_FIELDS_KEPT = 4096
#: The `TOOL` fields of a run's calls, by its tool sequence (kept as many as verdicts).
_TOOL_FIELDS: dict[tuple[str, ...], tuple[str, ...]] = {}
_TOOLS_KEPT_LONGEST = 64
#: Nor a sequence whose names are longer in all: a name may be 200 characters, and 4,096
#: kept sequences of 64 made-up ones held about 136 MB of a worker.
_TOOLS_KEPT_CHARS = 512


def cost_bucket(micros: int) -> int:
    """Round a cost in micro-USD up to `COST_DIGITS` significant digits."""
    if micros < _SMALL:
        return max(0, micros)
    # The scale by comparisons against powers of ten, not len(str()): ingest buckets
    # three values of every trace.
    for below, scale in _SCALES:
        if micros < below:
            return -(-micros // scale) * scale
    big: int = 10 ** (len(str(micros)) - COST_DIGITS)
    return -(-micros // big) * big


_SMALL: int = 10 ** COST_DIGITS
#: (bound, scale): a value under `bound` (and at least the bound before) keeps
#: COST_DIGITS digits at `scale`; past the last, the scale is worked out from its digits.
_SCALES: tuple[tuple[int, int], ...] = tuple((10 ** (digits + 1), 10 ** (digits + 1 - COST_DIGITS))
                for digits in range(COST_DIGITS, 19))


def increments(trace: Trace, verdict: TraceVerdict,
               reported_at: float | None = None) -> dict[str, int]:
    """The fields one trace adds to a window (non-zero only: the hash stays small), its
    report arriving at `reported_at` (ingest's clock; None: at the run's end)."""
    one = Increments()
    one.add(trace, verdict, reported_at)
    return one.totals()


class Increments:
    """The summed `increments` of several traces, gathered at a batch's speed.

    Ingest sums the increments of each group of traces it stores. Merged dict by
    dict, that cost about as much as validating the traces; here the names of the
    fields a trace adds 1 to go into one list, counted at once (`Counter`, in C),
    and the few it adds a value to (`VALUED`) are summed as numbers. The fields its
    verdict, tool calls, step count, answer and errors decide (most of a trace's)
    are one shared tuple per such shape (a role's runs have a handful), counted as a
    shape and spread over its fields once per batch; so are the few report buckets
    (`matching.reported_names`), lag buckets and cells a batch's runs fall in (named
    once each, not per trace). All are non-negative, so a sum is zero only when every
    trace's was, and then the field is left out as `increments` leaves it out.
    """

    __slots__ = ("cells", "lags", "minted", "ones", "reports", "shapes", "sums")

    def __init__(self) -> None:
        self.ones: list[str] = []
        self.sums = [0] * len(VALUED)
        self.shapes: dict[tuple[str, ...], int] = {}
        #: Each run's report bucket, and again for a run id minted at assignment.
        self.reports: list[int] = []
        self.minted: list[int] = []
        #: Each run's report lag bucket (`units.lag_bucket`: a handful in a batch).
        self.lags: list[int] = []
        #: The cell fields of each (start bucket, rule) met: (runs, failures, errors, forbidden).
        self.cells: dict[tuple[int, str | None], tuple[str, str, str, str]] = {}

    def add(self, trace: Trace, verdict: TraceVerdict, reported_at: float | None = None) -> None:
        """Add one trace's fields, its report arriving at `reported_at` (None: at its end)."""
        ones = self.ones
        # Every arriving run, judged or not, counts as reported in the time bucket it
        # started in (`gatekeeper.stats.reports` compares these with the assignments).
        report = report_bucket(trace)
        if report is not None:
            self.reports.append(report)
            if id_minted(trace):
                self.minted.append(report)
        if not verdict.judged:
            ones.append("unjudged")
            return
        latency_s = trace.latency_s
        cost = round(trace.cost_usd * MICROS)
        latency_ms = round(latency_s * 1000)
        steps, tokens, tool_errors = trace.step_count, trace.tokens, trace.tool_errors
        shape = _shape(verdict, trace.tools, steps, trace.answered, tool_errors > 0)
        shapes = self.shapes
        shapes[shape] = shapes.get(shape, 0) + 1
        ones.append(f"{COST}{cost_bucket(cost)}")
        if latency_s:
            ones.append(f"{LATENCY}{cost_bucket(latency_ms)}")
        if tokens:
            ones.append(f"{TOKENS}{cost_bucket(tokens)}")
        sums = self.sums
        sums[0] += tool_errors
        sums[1] += steps
        sums[2] += cost
        sums[3] += tokens
        sums[4] += latency_ms
        if trace.time is not None:
            start = trace.time - latency_s
            # A run is born at its start: a slow arm meets an outage in the other's cells.
            arrived = start + latency_s if reported_at is None else reported_at
            self.lags.append(lag_bucket(arrived - start))
            where = (bucket_of(start), trace.rule)
            names = self.cells.get(where)
            if names is None:
                cell = f"{where[0]}:{where[1] or ''}"
                names = self.cells[where] = (CELL_N + cell, "cf:" + cell, "ce:" + cell,
                                             "cx:" + cell)
            ones.append(names[0])
            if not verdict.passed:
                ones.append(names[1])
            if tool_errors:
                ones.append(names[2])
            if verdict.forbidden:
                ones.append(names[3])

    def totals(self) -> dict[str, int]:
        """{field: sum} of every trace added (non-zero fields only)."""
        out: dict[str, int] = Counter(self.ones)
        get = out.get
        for shape, count in self.shapes.items():
            for name in shape:  # a tool called twice is in it twice, and counts so
                out[name] = get(name, 0) + count
        for prefix, buckets in ((REPORTED, self.reports), (ID_REPORTED, self.minted),
                                (LAG, self.lags)):
            for bucket, count in Counter(buckets).items():
                out[f"{prefix}{bucket}"] = count
        for name, value in zip(VALUED, self.sums):
            if value:
                out[name] = value
        return out


def _shape(verdict: TraceVerdict, tools: tuple[str, ...], steps: int, answered: bool,
           errored: bool) -> tuple[str, ...]:
    """The fields a judged run adds 1 to that its verdict, tools, step count, answer and
    errors decide, worked out once per such shape (kept as `_tool_fields` keeps tools)."""
    key = (verdict.json_text, tools, steps, answered, errored)
    found = _SHAPES.get(key)
    if found is None:
        fields = ["n", f"{STEPS}{steps}", *_verdict_fields(verdict)]
        if answered:
            fields.append("answered")
        if errored:
            fields.append("error_runs")
        if tools:
            fields += _tool_fields(tools)
        found = tuple(fields)
        if (len(tools) > _TOOLS_KEPT_LONGEST or verdict.names() > KEPT_NAMES
                or sum(map(len, tools)) > _TOOLS_KEPT_CHARS):
            return found  # made-up names: not kept, as the other memos keep none
        if len(_SHAPES) >= _VERDICT_FIELDS_KEPT:
            _SHAPES.clear()
        _SHAPES[key] = found
    return found


#: The fields of each run shape (`_shape`): kept as many as verdicts.
_SHAPES: dict[tuple[object, ...], tuple[str, ...]] = {}


def _tool_fields(tools: tuple[str, ...]) -> tuple[str, ...]:
    """The `TOOL` field of each call in `tools`, worked out once per tool sequence: a role's
    runs call a handful of sequences, and a tuple of names hashes from their cached hashes."""
    found = _TOOL_FIELDS.get(tools)
    if found is None:
        found = tuple([TOOL + tool for tool in tools])
        if len(tools) > _TOOLS_KEPT_LONGEST or sum(map(len, tools)) > _TOOLS_KEPT_CHARS:
            return found  # a long one is not kept: it would pin its names in memory
        if len(_TOOL_FIELDS) >= _VERDICT_FIELDS_KEPT:
            _TOOL_FIELDS.clear()
        _TOOL_FIELDS[tools] = found
    return found


def _verdict_fields(verdict: TraceVerdict) -> tuple[str, ...]:
    """The fields `verdict` decides on its own (each once), worked out once per verdict."""
    text = verdict.json_text
    found = _VERDICT_FIELDS.get(text)
    if found is None:
        out: dict[str, None] = {}
        if verdict.passed:
            out["passes"] = None
        if verdict.forbidden:
            out["forbidden"] = None
            out.update(dict.fromkeys(FORBID + tool for tool in verdict.forbidden))
        if verdict.forbidden or verdict.required_lost:
            out["blocking"] = None
            out.update(dict.fromkeys(LOST + tool for tool in verdict.required_lost))
        for name, held in verdict.criteria.items():
            out[CRIT_N + name] = None
            if held:
                out[CRIT_PASS + name] = None
        found = tuple(out)
        if verdict.names() <= KEPT_NAMES:  # a verdict of many made-up tools: not kept
            if len(_VERDICT_FIELDS) >= _VERDICT_FIELDS_KEPT:
                _VERDICT_FIELDS.clear()
            _VERDICT_FIELDS[text] = found
    return found
