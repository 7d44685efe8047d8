"""The binding table's data model: which config serves a role, and how it rolls out.

Pure data: no Flask, no Redis. Every invariant of a binding is checked here, so
the store, the API, the CLI and the example file all refuse the same things with
the same messages.
"""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# One config-id rule, and one definition of the stages, in the caller SDK: clients
# name configs and route with them too.
from bindings.judge_policy import JudgePolicy
from bindings.power_policy import PowerPolicy
from bindings.reports_policy import ReportsPolicy
from bindings.responses_policy import RESPONSE_KEY_PATTERN, ResponseName, check_response_keys
from bindings.responses_policy import RESPONSE_RULES as RESPONSE_RULES
from rolegate.config_ids import STORED, ConfigId
from rolegate.routing import LATEST_BUCKET_VERSION, SALT_PATTERN, Stage
from rolegate.trace import JsonInt, JsonNumber, NonNegativeJsonInt, PositiveJsonInt

__all__ = ["Approval", "Binding", "BindingFile", "CanaryStep", "DriftPolicy", "Frozen", "GatePolicy",
           "HistoryEntry", "Invariants", "Rule", "Stage", "Step", "Thresholds", "VersionedBinding",
           "step_share", "validate_role_name"]

#: Role names become part of Redis keys and URL paths; keep them boring.
ROLE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: Names a route uses where a role name would go, so such a role could not be read at its URL.
RESERVED_ROLE_NAMES = {"watch": "GET /v1/bindings/watch is the long-poll for binding changes"}
#: The role-name pattern with the reserved names excluded, for the OpenAPI document.
ROLE_NAME_SCHEMA_PATTERN = (
    "^(?!(?:" + "|".join(sorted(RESERVED_ROLE_NAMES)) + ")$)" + ROLE_NAME_PATTERN.pattern[1:])
DEFAULT_STEPS: tuple[float, ...] = (0.1, 0.5, 1.0)
#: Attribute names in targeting rules and resolves (`attr.<name>=`).
ATTRIBUTE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_RULES = 50
MAX_RULE_ATTRIBUTES = 10



class Frozen(BaseModel):
    """Base for every model here: immutable, unknown keys and NaN/Infinity are errors.

    Python's json reads NaN, but pydantic writes it back as null, so a stored
    NaN would make the record unreadable: refuse it on the way in.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Thresholds(Frozen):
    """The numbers the regression gate compares a window of traces against."""

    min_pass_rate: JsonNumber = Field(0.9, ge=0.0, le=1.0)
    max_forbidden_rate: JsonNumber = Field(0.0, ge=0.0, le=1.0)
    #: The judged arm's p95 steps may not exceed this, nor current's p95 by more
    #: than `max_p95_steps_increase` (None: not compared with current); read once,
    #: at the stage's end, with distribution-free quantile bounds.
    p95_step_ceiling: PositiveJsonInt | None = None
    max_p95_steps_increase: JsonNumber | None = Field(None, ge=0.0)
    max_mean_cost_usd: JsonNumber | None = Field(None, ge=0.0)
    #: The candidate's p95 latency may not exceed this (seconds), nor current's p95
    #: by more than `max_p95_latency_increase` (a warning line of +20%); read
    #: once, at the stage's end, with distribution-free quantile bounds.
    p95_latency_ceiling_s: JsonNumber | None = Field(None, gt=0.0)
    max_p95_latency_increase: JsonNumber | None = Field(0.2, ge=0.0)
    #: Traces a stage needs before it may advance (promotion only: evidence that
    #: already excludes the threshold rolls back before it).
    min_samples: JsonInt = Field(50, ge=1)
    #: The stage alpha: each stage of the ladder adds this much to the chance a
    #: rollout rolls back a candidate no worse than current, all its tests together
    #: (split in `gatekeeper.stats.budget`; the sequential tests spend the rollout's sum at
    #: once, `gatekeeper.stats.rollout`). 0.0025 over the default ladder's four stages
    #: keeps a rollout's false rollbacks within 1%.
    alpha: JsonNumber = Field(0.0025, gt=0.0, lt=1.0)
    #: Paired shadow runs needed before shadow may pass (None: min_samples). Size it
    #: for power against the smallest drop worth catching before users see it.
    min_shadow_pairs: PositiveJsonInt | None = None
    #: A stage must last at least this long before the gatekeeper advances it
    #: (15 minutes: a stage sees more than one burst of traffic).
    min_stage_seconds: JsonNumber = Field(900.0, ge=0.0)
    #: How long the full stage bakes before the candidate becomes stable (2 hours:
    #: slow regressions and daily traffic shapes show before current is replaced).
    bake_seconds: JsonNumber = Field(7200.0, ge=0.0)
    #: A stage still undecided this long after its minimum duration (too little
    #: traffic, or evidence that settles neither way) takes `deadline_action`
    #: instead of holding forever (Flagger's progressDeadlineSeconds). 24 hours by
    #: default; None: no deadline (`gatekeeper.machine.deadline`).
    stage_deadline_seconds: JsonNumber | None = Field(86_400.0, gt=0.0)
    #: What an overdue stage does: "hold" (the gatekeeper pauses the role for a
    #: human, with the reason, and alerts) or "rollback".
    deadline_action: Literal["hold", "rollback"] = "hold"


class Invariants(Frozen):
    """Properties every run must hold. Never exact outputs."""

    #: A run that did not answer (`answered: false` in its trace) fails, under the
    #: criterion key `answered`. False only for an agent whose runs legitimately
    #: end without an answer; its other invariants then judge those runs alone.
    answered: bool = True
    artifact_exists: tuple[str, ...] = ()
    must_contain_table: bool = False
    forbidden_tools: tuple[str, ...] = ()
    #: None means "no allowlist"; an empty tuple means "no tool may be called".
    allowed_tools: tuple[str, ...] | None = None
    required_tools: tuple[str, ...] = ()
    max_steps: NonNegativeJsonInt | None = None
    max_cost_usd: JsonNumber | None = Field(None, ge=0.0)

    @model_validator(mode="after")
    def _no_tool_both_required_and_forbidden(self) -> Invariants:
        clash = set(self.required_tools) & set(self.forbidden_tools)
        if clash:
            raise ValueError(
                f"required_tools and forbidden_tools both name {sorted(clash)}"
            )
        if self.allowed_tools is not None:
            missing = set(self.required_tools) - set(self.allowed_tools)
            if missing:
                raise ValueError(f"required_tools {sorted(missing)} are not in allowed_tools")
        return self


class DriftPolicy(Frozen):
    """Bernoulli CUSUM settings: alarm when a rate rises by `shift` above p0."""

    enabled: bool = True
    shift: JsonNumber = Field(0.05, gt=0.0, lt=1.0)
    #: The alarm level; None (the default) derives it per p0 from the stage alpha
    #: (an in-control ARL target, `gatekeeper.stats.cusum_arl`), a fixed h alarms falsely
    #: at very different rates at different base rates.
    h: JsonNumber | None = Field(None, gt=0.0)
    #: Fixed baseline rates per metric; otherwise p0 comes from the current arm.
    baseline: dict[str, JsonNumber] = Field(default_factory=dict)




class GatePolicy(Frozen):
    """How a role's candidate is judged: thresholds plus per-run invariants."""

    thresholds: Thresholds = Field(default_factory=Thresholds)
    invariants: Invariants = Field(default_factory=Invariants)
    drift: DriftPolicy = Field(default_factory=DriftPolicy)
    #: When true, a candidate may enter shadow only after an offline suite pass.
    require_offline_pass: bool = False
    #: Token names whose traces alone count toward promotion (None: every reporter's).
    #: Any in-scope reporter's forbidden call still trips the wire: rolling back is
    #: the safe direction, and a reporter can only cause one by reporting for a role
    #: its token is scoped to.
    trusted_reporters: tuple[str, ...] | None = Field(None, min_length=1, max_length=100)
    #: Graded responses (`gatekeeper.machine.responses`): per rule that would roll back
    #: (`sequential`, `drift`, `criterion:<key>`, ...), "rollback" (the default), "hold"
    #: (stop and wait for a human) or "warn" (record and notify, no effect). A forbidden
    #: tool is a rollback whatever this says.
    responses: dict[str, ResponseName] = Field(default_factory=dict, max_length=64, json_schema_extra={
        "propertyNames": {"pattern": RESPONSE_KEY_PATTERN}})
    #: How each criterion key of the config's spec is gated (`gatekeeper.stats.criteria_gate`):
    #: "gated" (the default for a key not named: a sequential test against current),
    #: "blocking" (zero tolerance: one failing candidate run rolls back) or "observed"
    #: (shown, never acting).
    criteria: dict[Annotated[str, Field(min_length=1, max_length=300)],
                   Literal["gated", "blocking", "observed"]] = Field(
        default_factory=dict, max_length=200)
    #: The online judge of the config's judge criteria (None: none is asked).
    judge: JudgePolicy | None = None
    #: Runs assigned but never reported (`bindings.reports_policy`): failed, or ignored.
    reports: ReportsPolicy = Field(default_factory=ReportsPolicy)
    #: The power hold (`bindings.power_policy`): a stage advances only once the gate
    #: could have caught the smallest regression worth catching (None: off).
    power: PowerPolicy | None = Field(default_factory=PowerPolicy)

    @field_validator("responses")
    @classmethod
    def _responses_name_rules(cls, value: dict[str, str]) -> dict[str, str]:
        return check_response_keys(value)


class CanaryStep(Frozen):
    """One rung of the canary ladder that also says how long it must last.

    `min_seconds` overrides the gate's `min_stage_seconds` for this step (as an
    Argo canary step pauses for a duration); None keeps the gate's.
    """

    share: JsonNumber = Field(gt=0.0, le=1.0)
    min_seconds: JsonNumber | None = Field(None, ge=0.0)
    #: Hold the rollout at this step, once the gate passes, until an operator approves
    #: (Argo's `pause: {}`, Flagger's confirm-promotion). Rollback never waits for it.
    approval: bool = False


#: A step of `steps`: a bare share, or a share with its own minimum duration.
Step = JsonNumber | CanaryStep


def step_share(step: Step) -> float:
    """The canary share a step of the ladder routes to the candidate."""
    return step.share if isinstance(step, CanaryStep) else step


class Approval(Frozen):
    """An operator's approval of the stage a binding is in, so it may advance past it."""

    actor: str = Field(min_length=1, max_length=200)
    time: JsonNumber
    reason: str = Field(min_length=1, max_length=2000)


class Rule(Frozen):
    """Targeting: jobs whose attributes match `when` get `arm`, before any bucketing.

    `when` maps an attribute name to the values that match it; a job matches when
    each named attribute has one of its values. Rules act only while a canary or
    full stage is live, so a rollback still sends everyone to current.
    """

    when: dict[str, tuple[str, ...]]
    arm: Literal["current", "candidate"]
    #: How answers, traces and the gate view's `?rule=` name it (default: its position).
    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")

    @field_validator("when")
    @classmethod
    def _when_names_values(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        if not value:
            raise ValueError("when must name at least one attribute (an empty one matches all)")
        if len(value) > MAX_RULE_ATTRIBUTES:
            raise ValueError(f"when names at most {MAX_RULE_ATTRIBUTES} attributes")
        for name, values in value.items():
            if not ATTRIBUTE_NAME_PATTERN.match(name):
                raise ValueError(f"attribute name {name!r} must be 1-64 letters, digits, "
                                 "'_', '.', '-'")
            if not values:
                raise ValueError(f"when.{name} must list at least one value")
        return value


#: The share of bucketed jobs `full` keeps on current by default, and the most it may keep.
DEFAULT_HOLDBACK = 0.05
MAX_HOLDBACK = 0.5


class Binding(Frozen):
    """One role's routing: the current config, the candidate and its stage."""

    #: Config ids follow the one rule in `rolegate.config_ids`.
    current: ConfigId
    candidate: ConfigId | None = None
    stage: Stage = Stage.STABLE
    share: JsonNumber = 0.0
    steps: tuple[Step, ...] = DEFAULT_STEPS
    paused: bool = False
    gate: GatePolicy = Field(default_factory=GatePolicy)
    #: Targeting rules, in order: the first whose attributes match picks the arm.
    rules: tuple[Rule, ...] = Field((), max_length=MAX_RULES)
    #: When the current stage (or canary step) began, in epoch seconds.
    stage_since: JsonNumber | None = None
    #: The approval of the current stage, when its step asks for one; any stage move
    #: clears it (an approval is for one step, never the next).
    approved: Approval | None = None
    description: str = Field("", max_length=2000)
    #: In `full`, the share of bucketed jobs kept on current while the candidate bakes:
    #: the concurrent control the gate compares the candidate with (sticky: the keys
    #: whose bucket is at or above 1 - holdback). 0 turns it off, and with it the
    #: gate's ability to tell a regression in `full` from a world-wide shift.
    holdback: JsonNumber = Field(DEFAULT_HOLDBACK, ge=0.0, le=MAX_HOLDBACK)
    #: This role's cap on each of its trace streams (entries), over the router's
    #: ROLEGATE_TRACE_RETENTION; None keeps the router's. Applied at the next trace.
    trace_retention: Annotated[JsonInt, Field(ge=1, le=1_000_000_000)] | None = None
    #: Bucketing (docs/bucketing.md, bindings.bucketing): the unit's attribute (None: key).
    bucket_by: Annotated[str, Field(pattern=ATTRIBUTE_NAME_PATTERN.pattern)] | None = None
    salt: Annotated[str, Field(pattern=SALT_PATTERN)] | None = None
    bucket_version: JsonInt = Field(1, ge=1, le=LATEST_BUCKET_VERSION)

    @field_validator("share")
    @classmethod
    def _share_in_unit_interval(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"share must be within 0..1, got {value}")
        return value

    @field_validator("steps")
    @classmethod
    def _steps_ascending(cls, value: tuple[Step, ...]) -> tuple[Step, ...]:
        if not value:
            raise ValueError("steps must name at least one canary share")
        shares = [step_share(step) for step in value]
        for share in shares:
            if not 0.0 < share <= 1.0:
                raise ValueError(f"each step must be within (0, 1], got {share}")
        if any(b <= a for a, b in itertools.pairwise(shares)):
            raise ValueError(f"steps must be strictly ascending, got {shares}")
        return value

    @field_validator("rules")
    @classmethod
    def _rule_names_unique(cls, value: tuple[Rule, ...]) -> tuple[Rule, ...]:
        names = [rule.name for rule in value if rule.name is not None]
        if len(names) != len(set(names)):
            raise ValueError("rule names must be unique")
        return value

    @model_validator(mode="after")
    def _stage_matches_share_and_candidate(self) -> Binding:
        stage = self.stage
        if stage in (Stage.SHADOW, Stage.CANARY, Stage.FULL) and self.candidate is None:
            raise ValueError(f"candidate: stage {stage.value!r} needs a candidate config")
        if stage in (Stage.STABLE, Stage.SHADOW, Stage.ROLLED_BACK) and self.share != 0.0:
            raise ValueError(f"share: stage {stage.value!r} routes no traffic to the candidate, "
                             f"so share must be 0, got {self.share}")
        if stage is Stage.CANARY and not 0.0 < self.share < 1.0:
            raise ValueError(f"share: stage 'canary' needs 0 < share < 1, got {self.share}")
        if stage is Stage.FULL and self.share != 1.0:
            raise ValueError(f"share: stage 'full' needs share 1, got {self.share}")
        if self.candidate is not None and self.candidate == self.current:
            raise ValueError("candidate: must differ from current")
        return self

    @property
    def step_shares(self) -> tuple[float, ...]:
        """The canary ladder's shares, durations left out."""
        return tuple(step_share(step) for step in self.steps)

    def step_min_seconds(self, share: float) -> float | None:
        """The minimum duration the ladder sets for the step at `share`, if it sets one."""
        for step in self.steps:
            if isinstance(step, CanaryStep) and step.share == share:
                return step.min_seconds
        return None

    def needs_approval(self) -> bool:
        """Whether the step the binding stands on holds for an operator's approval."""
        if self.stage is Stage.CANARY:
            share = self.share
        elif self.stage is Stage.FULL:
            share = 1.0
        else:
            return False
        return any(isinstance(step, CanaryStep) and step.approval and step.share == share
                   for step in self.steps)

    def with_changes(self, **changes: Any) -> Binding:
        """Return a copy with `changes` applied and every invariant checked again.

        A change of stage, share or stage start drops the approval: it was given for
        the step the binding stood on.
        """
        data = self.model_dump()
        if {"stage", "share", "stage_since"} & set(changes) and "approved" not in changes:
            data["approved"] = None
        data.update(changes)
        # Its config ids were accepted when it was written; a move only reorders them.
        return Binding.model_validate(data, context={STORED: True})


class BindingFile(Frozen):
    """The import/export format: `{"roles": {name: binding}}`."""

    roles: dict[str, Binding]

    @field_validator("roles")
    @classmethod
    def _role_names_valid(cls, value: dict[str, Binding]) -> dict[str, Binding]:
        for name in value:
            validate_role_name(name)
        return value


class VersionedBinding(Frozen):
    """A binding as stored: with the version its compare-and-set works against."""

    role: str
    version: JsonInt = Field(ge=1)
    binding: Binding
    updated_at: JsonNumber
    updated_by: str


class HistoryEntry(Frozen):
    """One append-only record of a change: who, when, why, and the whole result."""

    role: str
    version: JsonInt = Field(ge=1)
    time: JsonNumber
    actor: str
    action: str
    reason: str
    binding: Binding
    #: Numbers behind the decision (gate reasons, the run id of a tripwire, ...).
    details: dict[str, Any] = Field(default_factory=dict)


def validate_role_name(name: str) -> str:
    """Return `name` if it is a usable role name, else raise ValueError.

    Matched as the whole string: `re.match` with `$` would take "authrole\n",
    which then shows as "authrole" in every listing.
    """
    if not ROLE_NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"role name {name!r} must be 1-128 characters of letters, digits, '_', '.', '-' "
            "and start with a letter or digit"
        )
    if name in RESERVED_ROLE_NAMES:
        raise ValueError(f"role name {name!r} is reserved: {RESERVED_ROLE_NAMES[name]}")
    return name
