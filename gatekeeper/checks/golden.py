"""Feedback-aware golden sets: which production cases become offline scenarios, and their reference.

Pure: traces and feedback in, a sample out. Cases are recent and made
under the role's current policy (its current config, since the config's criteria
last changed). They are sampled per feedback tier with a quota each, so rare
corrections are not buried under routine traffic:

    negative_corrected  negative feedback a human corrected
    negative            negative feedback, no correction yet
    positive            positive feedback
    reprocessed         the case was run again in production
    reviewed            a reviewer looked and left no opinion
    no_feedback         nothing recorded, and old enough that review would have happened

The reference result is the correction when a human supplied one, else the
reprocessed result, else the accepted production outcome; a case judged wrong
with no correction has no reference (the recorded outcome is kept as rejected).
Cases whose feedback conflicts or is ambiguous are flagged for a human, never
silently included.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rolegate.trace import Trace

FeedbackTier = Literal["negative_corrected", "negative", "positive", "reprocessed", "reviewed"]
FEEDBACK_TIERS: tuple[str, ...] = (
    "negative_corrected", "negative", "positive", "reprocessed", "reviewed")
NO_FEEDBACK = "no_feedback"
SAMPLE_TIERS: tuple[str, ...] = (*FEEDBACK_TIERS, NO_FEEDBACK)
#: Rare, high-signal tiers (human corrections first) get the larger quotas, so raw
#: traffic's routine cases cannot bury them.
DEFAULT_QUOTAS: dict[str, int] = {
    "negative_corrected": 40, "negative": 20, "positive": 20, "reprocessed": 15,
    "reviewed": 15, NO_FEEDBACK: 15,
}
#: A case younger than this has probably not been looked at yet.
DEFAULT_MIN_AGE_S = 2 * 24 * 3600.0
DEFAULT_WINDOW_S = 30 * 24 * 3600.0
ReferenceSource = Literal["correction", "reprocessed", "accepted", "none"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class Feedback(BaseModel):
    """One reviewer's word on one run: a tier, who, when, and an optional correction.

    A `negative` with a correction is stored as `negative_corrected`; a correction
    on `reprocessed` is the reprocessed result. Positive and reviewed carry none.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    run_id: str = Field(min_length=1, max_length=200)
    tier: FeedbackTier
    reviewer: str = Field(min_length=1, max_length=200)
    time: float
    correction: Any = None
    note: str = Field("", max_length=4000)

    @model_validator(mode="before")
    @classmethod
    def _corrected_negative(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tier") == "negative" \
                and data.get("correction") is not None:
            data = {**data, "tier": "negative_corrected"}
        return data

    @model_validator(mode="after")
    def _correction_fits_tier(self) -> Feedback:
        if self.tier == "negative_corrected" and self.correction is None:
            raise ValueError("correction: tier 'negative_corrected' needs the human correction")
        if self.tier in ("positive", "reviewed") and self.correction is not None:
            raise ValueError(f"correction: tier {self.tier!r} takes no correction")
        return self


@dataclass(frozen=True)
class Case:
    """One sampled case: the trace, its tier, its feedback and the reference result."""

    trace: Trace
    tier: str
    reference: Any
    reference_source: ReferenceSource
    feedback: tuple[Feedback, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the trace by run_id)."""
        return {"run_id": self.trace.run_id, "tier": self.tier, "time": self.trace.time,
                "reference": self.reference, "reference_source": self.reference_source,
                "feedback": [f.model_dump(mode="json") for f in self.feedback]}


@dataclass(frozen=True)
class Flagged:
    """A case left out for a human to settle, and why."""

    run_id: str
    reason: str
    feedback: tuple[Feedback, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"run_id": self.run_id, "reason": self.reason,
                "feedback": [f.model_dump(mode="json") for f in self.feedback]}


@dataclass(frozen=True)
class GoldenSet:
    """The sample: cases by tier, flagged cases, and what each tier had to offer."""

    cases: tuple[Case, ...]
    flagged: tuple[Flagged, ...]
    #: Per tier: available (eligible cases), taken, quota.
    tiers: dict[str, dict[str, int]]
    #: Why traces were left out: other_config, old_policy, stale, too_recent, no_input.
    excluded: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"cases": [c.as_dict() for c in self.cases],
                "flagged": [f.as_dict() for f in self.flagged],
                "tiers": self.tiers, "excluded": self.excluded}


def classify(feedback: Sequence[Feedback]) -> tuple[str | None, str | None]:
    """The tier a run's feedback puts it in, or (None, why it is ambiguous)."""
    tiers = [f.tier for f in feedback]
    if not tiers:
        return NO_FEEDBACK, None
    negative = any(t in ("negative", "negative_corrected") for t in tiers)
    if negative and "positive" in tiers:
        return None, "conflicting feedback: both positive and negative"
    corrections = {_canonical(f.correction) for f in feedback if f.tier == "negative_corrected"}
    if len(corrections) > 1:
        return None, f"conflicting corrections: {len(corrections)} different ones"
    reprocessed = tiers.count("reprocessed")
    if reprocessed > 1:
        return None, f"reprocessed {reprocessed} times: the reference state is ambiguous"
    for tier in FEEDBACK_TIERS:  # highest signal first
        if tier in tiers:
            return tier, None
    return None, "unknown feedback"  # pragma: no cover - every tier is listed above


def reference(trace: Trace, feedback: Sequence[Feedback]) -> tuple[Any, ReferenceSource]:
    """The expected result: the correction, else the reprocessed result, else the outcome."""
    for wanted in ("negative_corrected", "reprocessed"):
        latest = [f for f in feedback if f.tier == wanted and f.correction is not None]
        if latest:
            source: ReferenceSource = "correction" if wanted == "negative_corrected" \
                else "reprocessed"
            return max(latest, key=lambda f: f.time).correction, source
    if any(f.tier == "negative" for f in feedback):
        # Judged wrong and nobody said what right is: no reference to score against.
        return None, "none"
    return accepted_outcome(trace), "accepted"


def accepted_outcome(trace: Trace) -> Any:
    """The production outcome as recorded: the output parsed as JSON when it is JSON."""
    try:
        return json.loads(trace.output_text)
    except ValueError:
        return trace.output_text


def with_inline(traces: Sequence[Trace], stored: Mapping[str, Sequence[Feedback]]
                ) -> tuple[dict[str, list[Feedback]], dict[str, str]]:
    """Stored feedback plus any a caller reported on the trace itself (`trace.feedback`).

    An inline entry is `{"tier", "reviewer"?, "correction"?, "note"?}`. Returns the
    merged feedback and, per run id, why an inline entry could not be read: those
    cases go to a human (pass it to `select` as `unreadable`).
    """
    merged = {run_id: list(notes) for run_id, notes in stored.items()}
    unreadable: dict[str, str] = {}
    for trace in traces:
        raw = trace.feedback
        if not raw or "tier" not in raw:
            continue
        data = {"reviewer": "caller", **raw, "run_id": trace.run_id,
                "time": trace.time if trace.time is not None else 0.0}
        try:
            entry = Feedback.model_validate(data)
        except ValidationError as exc:
            message = exc.errors(include_url=False)[0].get("msg", "invalid")
            unreadable[trace.run_id] = f"unreadable inline feedback: {message}"
            continue
        merged.setdefault(trace.run_id, []).append(entry)
    return merged, unreadable


def select(
    traces: Iterable[Trace],
    feedback: Mapping[str, Sequence[Feedback]],
    *,
    config: str,
    now: float,
    policy_since: float | None = None,
    quotas: Mapping[str, int] | None = None,
    min_age_s: float = DEFAULT_MIN_AGE_S,
    window_s: float = DEFAULT_WINDOW_S,
    seed: str = "golden",
    unreadable: Mapping[str, str] | None = None,
) -> GoldenSet:
    """Sample a golden set from `traces` of one role, with `feedback` keyed by run_id.

    Only traces of `config` (the role's current policy), made since `policy_since`
    and within `window_s` of `now`, with an input to rebuild them from, are
    eligible. No-feedback cases younger than `min_age_s` are left out. Within a
    tier the order is a hash of (seed, run_id): a stable sample that new traffic
    does not reshuffle. Runs in `unreadable` are flagged with that reason.
    """
    quotas = {**DEFAULT_QUOTAS, **(quotas or {})}
    excluded = dict.fromkeys(("other_config", "old_policy", "stale", "too_recent",
                              "no_input"), 0)
    pools: dict[str, list[Case]] = {tier: [] for tier in SAMPLE_TIERS}
    flagged: list[Flagged] = []
    for trace in traces:
        when = trace.time if trace.time is not None else float("-inf")
        if trace.config != config:
            excluded["other_config"] += 1
            continue
        if policy_since is not None and when < policy_since:
            excluded["old_policy"] += 1
            continue
        if when < now - window_s:
            excluded["stale"] += 1
            continue
        if not trace.input:
            excluded["no_input"] += 1
            continue
        notes = tuple(sorted(feedback.get(trace.run_id, ()), key=lambda f: f.time))
        tier, problem = classify(notes)
        if unreadable and trace.run_id in unreadable:
            tier, problem = None, unreadable[trace.run_id]
        if tier is None:
            flagged.append(Flagged(trace.run_id, problem or "ambiguous", notes))
            continue
        if tier == NO_FEEDBACK and now - when < min_age_s:
            excluded["too_recent"] += 1
            continue
        ref, source = reference(trace, notes)
        pools[tier].append(Case(trace, tier, ref, source, notes))
    cases: list[Case] = []
    counts: dict[str, dict[str, int]] = {}
    for tier in SAMPLE_TIERS:
        pool = sorted(pools[tier], key=lambda c: _rank(seed, c.trace.run_id))
        taken = pool[: max(0, quotas.get(tier, 0))]
        cases.extend(sorted(taken, key=lambda c: (c.trace.time or 0.0, c.trace.run_id)))
        counts[tier] = {"available": len(pool), "taken": len(taken), "quota": quotas.get(tier, 0)}
    return GoldenSet(tuple(cases), tuple(sorted(flagged, key=lambda f: f.run_id)), counts,
                     excluded)


def _rank(seed: str, run_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{run_id}".encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scenario_id(case: Case) -> str:
    """A file-safe, unique scenario id for a case: golden-<run id>-<hash>."""
    run_id = case.trace.run_id
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"golden-{_UNSAFE.sub('-', run_id).strip('-.')[:80]}-{digest}"


def to_scenario(case: Case, invariants: Mapping[str, Any], *,
                repeats: int = 3) -> tuple[dict[str, Any], dict[str, str]]:
    """The offline-suite scenario for a case, and its seed files (suite path -> text).

    The trace's `input` rebuilds it: `task` is the task (else the whole input as
    JSON), `files` are the workspace's initial files, and any other input fields
    are seeded as `input.json`. `expected` is the reference as text (JSON for
    structured results).
    """
    sid = scenario_id(case)
    data = dict(case.trace.input or {})
    task = data.pop("task", None)
    files = data.pop("files", None) or {}
    if not isinstance(task, str) or not task:
        task = json.dumps(case.trace.input, sort_keys=True)
    seeds: dict[str, str] = {}
    seed_files: dict[str, str] = {}
    entries = {str(p): c if isinstance(c, str) else json.dumps(c) for p, c in files.items()}
    if data:
        entries.setdefault("input.json", json.dumps(data, indent=2, sort_keys=True))
    for target, content in sorted(entries.items()):
        source = f"seed/{sid}/{target}"
        seeds[source] = content
        seed_files[target] = source
    expected = None
    if case.reference is not None:
        expected = case.reference if isinstance(case.reference, str) \
            else json.dumps(case.reference, sort_keys=True)
    scenario = {
        "id": sid, "seed_files": seed_files, "task": task, "invariants": dict(invariants),
        "repeats": repeats, "expected": expected,
        "tags": ["golden", f"tier:{case.tier}", f"reference:{case.reference_source}"],
    }
    return scenario, seeds
