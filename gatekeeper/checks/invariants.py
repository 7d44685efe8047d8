"""Per-trace invariants: properties a run must hold, checked one trace at a time.

Pure: a trace and the role's `Invariants` in, a `TraceVerdict` out. Each check has
a stable criterion key (the names in `CRITERIA`) so results line up across
versions and lanes (agents are nondeterministic: measure invariants, never exact output).

Only criteria the policy configures are judged; an unconfigured one is absent
from `TraceVerdict.criteria` rather than trivially true, so per-criterion pass
rates are never padded. The tool criteria need to know which tools ran: a trace
that reports steps but neither `tools` nor `steps` leaves them unjudged (missing
data never fails a run, and never trips the tripwire).

A run that did not answer (`answered: false`: it crashed, timed out, or handed
nothing back) fails under its own key, `answered`, unless the policy turns that
check off: an agent whose every run crashed must not pass because its crashes
broke no other rule.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bindings.models import Invariants
from rolegate.trace import Trace

ANSWERED = "answered"
ARTIFACT_EXISTS = "artifact_exists"
MUST_CONTAIN_TABLE = "must_contain_table"
FORBIDDEN_TOOLS = "forbidden_tools"
ALLOWED_TOOLS = "allowed_tools"
REQUIRED_TOOLS = "required_tools"
MAX_STEPS = "max_steps"
MAX_COST_USD = "max_cost_usd"

#: Every criterion key, in the order reports list them.
CRITERIA: tuple[str, ...] = (
    ANSWERED,
    ARTIFACT_EXISTS,
    MUST_CONTAIN_TABLE,
    FORBIDDEN_TOOLS,
    ALLOWED_TOOLS,
    REQUIRED_TOOLS,
    MAX_STEPS,
    MAX_COST_USD,
)

_HTML_TABLE = re.compile(r"<table\b", re.IGNORECASE)
#: A markdown delimiter row (one line): cells of hyphens, optionally colon-aligned, split
#: by pipes.
_DELIMITER_ROW = re.compile(r"[ \t]*\|?(?:[ \t]*:?-+:?[ \t]*\|)*[ \t]*:?-+:?[ \t]*\|?[ \t]*\r?")


@dataclass(frozen=True)
class TraceVerdict:
    """What one trace's invariants said.

    `forbidden` lists each tool called that is on the forbidden list, outside
    the allowlist, or called without the agent offering it (a step marked
    `offered: false`), in first-call order; `required_lost` each required tool never
    called. Either makes the verdict `blocking`: a zero-tolerance breach that no
    pass rate may average away.
    """

    passed: bool
    criteria: Mapping[str, bool] = field(default_factory=dict)
    forbidden: tuple[str, ...] = ()
    required_lost: tuple[str, ...] = ()
    missing_artifacts: tuple[str, ...] = ()
    tools_reported: bool = True
    #: False for a run whose record says nothing the gate can judge (`Trace.judged`).
    judged: bool = True

    @property
    def blocking(self) -> bool:
        """True when the trace breached a zero-tolerance rule."""
        return bool(self.forbidden or self.required_lost)

    @property
    def failed_criteria(self) -> tuple[str, ...]:
        """The criterion keys that did not hold, in `CRITERIA` order."""
        return tuple(name for name in CRITERIA if self.criteria.get(name) is False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what the ingest answer and the trace store carry)."""
        # Built once: ingest needs it twice per trace (the store and the answer).
        return dict(self._json)

    def names(self) -> int:
        """How many tool names and artifacts it lists (a memo keeps only short verdicts)."""
        return len(self.forbidden) + len(self.required_lost) + len(self.missing_artifacts)

    @functools.cached_property
    def json_text(self) -> str:
        """`to_json()` serialized compactly, built once (the store and the answer share it)."""
        if self.names() > KEPT_NAMES:  # a run's own made-up tools: not worth keeping
            return json.dumps(self._json, separators=(",", ":"))
        # Most traces of a role get one of a few verdicts: encode each once per process.
        return _verdict_text(self.passed, tuple(self.criteria.items()), self.forbidden,
                             self.required_lost, self.missing_artifacts, self.tools_reported,
                             self.judged)

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "passed": self.passed,
            "blocking": self.blocking,
            "criteria": dict(self.criteria),
            "failed": list(self.failed_criteria),
            "forbidden": list(self.forbidden),
            "required_lost": list(self.required_lost),
            "missing_artifacts": list(self.missing_artifacts),
            "tools_reported": self.tools_reported,
        }
        if not self.judged:
            out["judged"] = False
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceVerdict:
        """Rebuild a verdict from `to_json()` output."""
        return cls(
            passed=bool(data["passed"]),
            criteria={str(k): bool(v) for k, v in data.get("criteria", {}).items()},
            forbidden=tuple(data.get("forbidden", ())),
            required_lost=tuple(data.get("required_lost", ())),
            missing_artifacts=tuple(data.get("missing_artifacts", ())),
            tools_reported=bool(data.get("tools_reported", True)),
            judged=bool(data.get("judged", True)),
        )


#: The verdict of every run whose record says nothing the gate can judge.
UNJUDGED = TraceVerdict(passed=False, tools_reported=False, judged=False)


@functools.lru_cache(maxsize=1024)
def _verdict_text(passed: bool, criteria: tuple[tuple[str, bool], ...],
                  forbidden: tuple[str, ...], required_lost: tuple[str, ...],
                  missing_artifacts: tuple[str, ...], tools_reported: bool,
                  judged: bool = True) -> str:
    verdict = TraceVerdict(passed, dict(criteria), forbidden, required_lost, missing_artifacts,
                           tools_reported, judged)
    return json.dumps(verdict._json, separators=(",", ":"))


def tools_reported(trace: Trace) -> bool:
    """Whether the trace says which tools ran (steps, tool names, or no steps at all)."""
    return trace.steps is not None or bool(trace.tools) or trace.step_count == 0


def contains_table(text: str) -> bool:
    """True if `text` holds an HTML table or a markdown pipe table (header + delimiter row)."""
    if "<" in text and _HTML_TABLE.search(text):
        return True
    if "|" not in text or "-" not in text:
        return False
    # Line by line, the regex only on lines made of delimiter characters: ingest checks
    # every trace's output, and a MULTILINE scan tried the pattern at every line start.
    lines = text.split("\n")
    for index in range(1, len(lines)):
        line = lines[index]
        if "-" not in line or "|" not in line or line.strip(" \t|:-\r"):
            continue
        # GFM: the header row above has as many cells as the delimiter row.
        header = lines[index - 1]
        if (_DELIMITER_ROW.fullmatch(line) is not None and "|" in header
                and _cell_count(header) == _cell_count(line)):
            return True
    return False


def _cell_count(line: str) -> int:
    """The cells of a table row: its pipes + 1, less a leading and a trailing pipe."""
    body = line.strip()
    lead = body[:1] == "|"
    trail = len(body) > lead and body[-1] == "|"
    return body.count("|") + 1 - lead - trail


#: Distinct verdicts one policy keeps for reuse (a role's runs fall in a handful).
_VERDICTS_KEPT = 1024
#: A verdict naming more tools than this is built afresh each time, never kept: the memos
#: are for the few verdicts a role's runs share, and a run may name up to 256 made-up
#: tools of 200 characters (kept, each such verdict held about 190 KB per worker).
KEPT_NAMES = 16


@dataclass(frozen=True)
class Policy:
    """An Invariants policy with its tool lists turned into sets, built once per policy.

    `judge` is `check` for this policy. Equal verdicts are one object: most of a
    role's runs get one of a few, and each is built and encoded (`json_text`) once.
    """

    answered: bool
    artifacts: tuple[str, ...]
    table: bool
    forbidden: frozenset[str]
    allowed: frozenset[str] | None
    required: tuple[str, ...]
    max_steps: int | None
    max_cost_usd: float | None
    _verdicts: dict[tuple[Any, ...], TraceVerdict] = field(
        default_factory=dict, compare=False, repr=False)
    _artifact_set: frozenset[str] = field(init=False, compare=False, repr=False)
    _required_set: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_artifact_set", frozenset(self.artifacts))
        object.__setattr__(self, "_required_set", frozenset(self.required))

    def judge(self, trace: Trace) -> TraceVerdict:
        """Judge one trace against this policy (an unjudged trace: no criterion, no pass)."""
        if not trace.judged:
            return UNJUDGED
        answered = trace.answered if self.answered else None
        # Each list is first compared as a set (in C): most runs miss nothing and call
        # nothing forbidden, and only a run that does is walked in order.
        missing: tuple[str, ...] = ()
        artifacts = self.artifacts
        if artifacts and not self._artifact_set.issubset(trace.artifacts):
            produced = trace.artifacts
            missing = tuple([p for p in artifacts if p not in produced])
        table = contains_table(trace.output_text) if self.table else None
        tools, steps = trace.tools, trace.steps
        reported = steps is not None or bool(tools) or trace.step_count == 0
        hits: tuple[str, ...] | None = None
        outside: tuple[str, ...] | None = None
        lost: tuple[str, ...] | None = None
        if reported:
            unoffered = _unoffered(trace) if steps else None  # no steps: nothing unoffered
            forbidden = self.forbidden
            if unoffered:
                # A call to a tool the agent did not offer is one the run may not make,
                # whatever the role lists (issue 37): the model went outside its tools.
                hits = tuple([t for t in dict.fromkeys(tools)
                              if t in forbidden or t in unoffered])
            elif forbidden:
                hits = () if forbidden.isdisjoint(tools) else tuple(
                    [t for t in dict.fromkeys(tools) if t in forbidden])
            allowed = self.allowed
            if allowed is not None:
                outside = () if allowed.issuperset(tools) else tuple(
                    [t for t in dict.fromkeys(tools) if t not in allowed])
            if self.required:
                lost = () if self._required_set.issubset(tools) else tuple(
                    [t for t in self.required if t not in tools])
        steps_ok = None if self.max_steps is None else trace.step_count <= self.max_steps
        cost_ok = None if self.max_cost_usd is None else trace.cost_usd <= self.max_cost_usd
        key = (answered, missing, table, reported, hits, outside, lost, steps_ok, cost_ok)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdict(*key)
            if verdict.names() <= KEPT_NAMES:
                if len(self._verdicts) >= _VERDICTS_KEPT:
                    self._verdicts.clear()
                self._verdicts[key] = verdict
        return verdict

    def _verdict(self, answered: bool | None, missing: tuple[str, ...], table: bool | None,
                 reported: bool, hits: tuple[str, ...] | None,
                 outside: tuple[str, ...] | None, lost: tuple[str, ...] | None,
                 steps_ok: bool | None, cost_ok: bool | None) -> TraceVerdict:
        criteria: dict[str, bool] = {}
        if answered is not None:
            criteria[ANSWERED] = answered
        if self.artifacts:
            criteria[ARTIFACT_EXISTS] = not missing
        if table is not None:
            criteria[MUST_CONTAIN_TABLE] = table
        forbidden: list[str] = []
        if hits is not None:
            criteria[FORBIDDEN_TOOLS] = not hits
            forbidden.extend(hits)
        if outside is not None:
            criteria[ALLOWED_TOOLS] = not outside
            # An out-of-allowlist call counts as a forbidden call (issue 3).
            forbidden.extend(t for t in outside if t not in forbidden)
        if lost is not None:
            criteria[REQUIRED_TOOLS] = not lost
        if steps_ok is not None:
            criteria[MAX_STEPS] = steps_ok
        if cost_ok is not None:
            criteria[MAX_COST_USD] = cost_ok
        return TraceVerdict(
            passed=all(criteria.values()),
            criteria=criteria,
            forbidden=tuple(forbidden),
            required_lost=lost or (),
            missing_artifacts=missing,
            tools_reported=reported,
        )


@functools.lru_cache(maxsize=256)
def policy_of(invariants: Invariants) -> Policy:
    """The compiled policy of `invariants` (built once; ingest asks once per binding)."""
    allowed = invariants.allowed_tools
    return Policy(
        answered=invariants.answered,
        artifacts=invariants.artifact_exists,
        table=invariants.must_contain_table,
        forbidden=frozenset(invariants.forbidden_tools),
        allowed=None if allowed is None else frozenset(allowed),
        required=invariants.required_tools,
        max_steps=invariants.max_steps,
        max_cost_usd=invariants.max_cost_usd,
    )


def check(trace: Trace, invariants: Invariants) -> TraceVerdict:
    """Judge one trace against the role's invariants (an unjudged trace: no criterion, no pass)."""
    return policy_of(invariants).judge(trace)


def _unoffered(trace: Trace) -> frozenset[str]:
    """The tools of the steps marked `offered: false` (most traces: none, and no steps walk)."""
    steps = trace.steps
    if not steps:
        return frozenset()
    return frozenset([step.tool for step in steps if step.offered is False])


def offered_breaches(invariants: Invariants, offered: tuple[str, ...]) -> tuple[str, ...]:
    """The tools of `offered` (a config body's tool names) that a run may not call.

    Each tool on the forbidden list or outside the allowlist, in `offered` order.
    A framework that hides forbidden tools from the model never calls them, so its
    runs never trip the wire: the config is refused before it runs, not after.
    """
    policy = policy_of(invariants)
    return tuple(t for t in dict.fromkeys(offered)
                 if t in policy.forbidden or (policy.allowed is not None
                                              and t not in policy.allowed))
