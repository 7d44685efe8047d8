"""The run trace: one record of what one agent run did, shared by both lanes.

The online path (traces reported by callers) and the offline suite (scenario
runs) both build this model, so the gate computes the same thing in each
(if the two lanes computed metrics differently, an offline result would say
nothing about production). What can be derived is derived here; what
contradicts itself is refused here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationInfo,
    model_validator,
)

from rolegate.config_ids import ConfigId

TraceArm = Literal["current", "candidate", "shadow"]

#: Upper bounds far above any real run. Each number is added into Redis counters
#: as a 64-bit integer (cost in micro-USD, latency in ms), so an unbounded one
#: would overflow them and fail the ingest script half-way through a write.
MAX_STEPS = 1_000_000
MAX_TOKENS = 10**12
MAX_COST_USD = 1_000_000.0
MAX_LATENCY_S = 10_000_000.0
#: Each distinct tool name is one counter update inside the ingest script, which
#: blocks Redis while it runs: a run calling thousands of different tools is not real.
MAX_DISTINCT_TOOLS = 256
MAX_TOOL_NAME = 200
#: Agent, model and parallel-group names.
MAX_NAME = 200
MAX_ERROR_MESSAGE = 4000
#: A role name, matched as the whole string (pydantic's regex `$` does not match
#: before a trailing line break, so "authrole\n" is refused, not taken as "authrole").
ROLE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


def _json_whole_number(value: Any) -> Any:
    """Refuse what JSON does not call a number (true, false, "3") before pydantic's int.

    Pydantic's lax int reads true as 1 and "3" as 3; strict int refuses 3.0, which
    JSON Schema calls an integer. This keeps both right: numbers only, whole ones.
    """
    if type(value) is int:  # the common case, decided first: this runs for every count
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a whole number")  # noqa: TRY004 - pydantic reports only ValueError
    return value


#: An integer as JSON means it: a number with no fractional part (3 or 3.0), never a bool.
JsonInt = Annotated[int, BeforeValidator(_json_whole_number)]
#: An optional count with a lower bound (`PositiveJsonInt | None`): the bound sits
#: before the validator, so the JSON schema says "minimum" (a Field(ge=) on
#: `JsonInt | None` comes out as a bare "ge", which schema readers ignore).
PositiveJsonInt = Annotated[int, Field(ge=1), BeforeValidator(_json_whole_number)]
NonNegativeJsonInt = Annotated[int, Field(ge=0), BeforeValidator(_json_whole_number)]
#: A number as JSON means it: an integer or a fraction, never true/false or numeric
#: text ("0.5"), which pydantic's lax float takes as 1.0/0.0 and 0.5.
JsonNumber = Annotated[float, Strict()]
#: A tool name: 1-200 characters, no line break (the ingest script reads its
#: increments as "field\nvalue" lines).
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TOOL_NAME,
                                            pattern=r"^[^\n]+$")]
#: Job attributes a trace may carry (those a targeting rule read).
MAX_ATTRIBUTES = 10
#: The validation context key of what the receiving server stamps on a trace as it
#: validates it: `{STAMP: {"reporter": name, "time": now}}` sets `reporter` whatever
#: the body said, and `time` where the body gives none (router ingest).
STAMP = "stamp"


class Step(BaseModel):
    """One tool call: its name, its arguments, and the error it returned if any.

    The optional fields say who made the call and what it cost: `agent` (and the
    `parent_agent` that handed off to it), `parallel_group` (calls issued together
    share an id; their completion order carries no meaning, so pairing compares
    a group as a set), the tokens of the model turn that issued the call, the
    call's own `latency_s` and the `model` that chose it; `offered: false` marks
    a call to a tool the agent did not offer.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tool: ToolName
    args: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    #: The tool's answer, kept when a fixture is recorded for replay.
    result: Any = None
    agent: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    parent_agent: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    parallel_group: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    tokens_in: JsonInt | None = Field(None, ge=0, le=MAX_TOKENS)
    tokens_out: JsonInt | None = Field(None, ge=0, le=MAX_TOKENS)
    latency_s: float | None = Field(None, ge=0.0, le=MAX_LATENCY_S, strict=True)
    model: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    #: False for a call to a tool the agent did not offer the model (it made the
    #: name up, or the config no longer offers it); the integrations mark it. The
    #: gate counts it as a call the run may not make, as a forbidden one: on a
    #: candidate or shadow run it trips the wire. None (absent): not said.
    offered: bool | None = Field(None, strict=True)


class RunError(BaseModel):
    """Why a run ended abnormally: the exception's type and message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(min_length=1, max_length=MAX_NAME)
    message: str = Field("", max_length=MAX_ERROR_MESSAGE)


class Stamps(BaseModel):
    """What produced the run, so any later difference can be attributed."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    agent_version: str = Field(min_length=1, max_length=200)
    instruction_hash: str = Field(min_length=1, max_length=200)
    model_id: str = Field(min_length=1, max_length=200)
    tool_schema_hash: str = Field(min_length=1, max_length=200)


class Trace(BaseModel):
    """One agent run's trace, as reported to rolegate."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    run_id: str = Field(min_length=1, max_length=200)
    role: str = Field(min_length=1, max_length=128, pattern=ROLE_PATTERN)
    config: ConfigId
    arm: TraceArm
    key: str = Field("", max_length=500)
    tools: tuple[ToolName, ...] = ()
    steps: tuple[Step, ...] | None = None
    # A JSON true/false is not a count or an amount (lax mode reads true as 1).
    step_count: JsonInt = Field(0, ge=0, le=MAX_STEPS)
    tool_errors: JsonInt = Field(0, ge=0, le=MAX_STEPS)
    answered: bool = Field(True, strict=True)
    cost_usd: float = Field(0.0, ge=0.0, le=MAX_COST_USD, strict=True)
    tokens: JsonInt = Field(0, ge=0, le=MAX_TOKENS)
    #: Prompt and completion tokens; `tokens` defaults to their sum.
    tokens_in: JsonInt | None = Field(None, ge=0, le=MAX_TOKENS)
    tokens_out: JsonInt | None = Field(None, ge=0, le=MAX_TOKENS)
    latency_s: float = Field(0.0, ge=0.0, le=MAX_LATENCY_S, strict=True)
    artifacts: tuple[str, ...] = ()
    output_text: str = ""
    stamps: Stamps
    scenario: str | None = None
    feedback: dict[str, Any] | None = None
    #: The job's input, so a case can be rebuilt as an offline scenario.
    input: dict[str, Any] | None = None
    #: When the run ended (epoch seconds); the server fills it in on ingest if absent.
    time: float | None = Field(None, strict=True)
    #: Set when the run raised or was aborted instead of finishing.
    error: RunError | None = None
    #: False when the run's record carries nothing the gate can judge (spans of
    #: no convention rolegate reads): such a run is counted as `unjudged`, apart,
    #: never as a pass (nor a failure), and it is left out of pairing and drift.
    judged: bool = Field(True, strict=True)
    #: The name of the token that reported the run: stamped by the router on
    #: ingest, whatever the body said, so evidence can be told apart by reporter.
    reporter: str | None = Field(None, max_length=200)
    #: The targeting rule that picked the arm (None when the job was bucketed), and the
    #: job's attributes that decided: the rule's, and the unit's when the role buckets
    #: by an attribute (`bucket_by`: one more than a rule may read). Both from the resolution.
    rule: str | None = Field(None, min_length=1, max_length=64)
    attributes: dict[str, str] | None = Field(None, max_length=MAX_ATTRIBUTES + 1)

    def _fill(self, info: ValidationInfo) -> None:
        """Fill tools, step_count, tool_errors and tokens from what was given, when left out.

        With a `STAMP` in the validation context, also set what the receiving
        server decides (`reporter`, and `time` where the body gives none).

        Done after the fields are validated, not before: a before-validator would have
        pydantic-core turn a JSON body into Python dicts first and validate those,
        where now it validates the bytes straight into the model (router ingest
        validates every reported trace; this was about 40% of its validation). What is
        derived comes from validated fields, so it needs no validating of its own
        beyond the bounds checked here.
        """
        given = self.__pydantic_fields_set__
        values = self.__dict__
        context = info.context
        stamp = context.get(STAMP) if context else None
        if stamp is not None:
            # In the one validation: a batch would otherwise pay a model copy per trace.
            reporter = stamp["reporter"]
            if reporter is not None and len(reporter) > MAX_NAME:
                raise ValueError(f"reporter: at most {MAX_NAME} characters")
            values["reporter"] = reporter
            given.add("reporter")
            if values["time"] is None:
                values["time"] = stamp["time"]
                given.add("time")
        steps = values["steps"]
        if steps is not None:
            if "tools" not in given:
                values["tools"] = tuple([step.tool for step in steps])
                given.add("tools")
            if "step_count" not in given:
                if len(steps) > MAX_STEPS:
                    raise ValueError(f"step_count: at most {MAX_STEPS} steps per trace")
                values["step_count"] = len(steps)
                given.add("step_count")
            if "tool_errors" not in given:
                values["tool_errors"] = len([step for step in steps if step.error])
                given.add("tool_errors")
        elif "tools" in given and "step_count" not in given:
            # Only tool names were given: each call is a step.
            calls = len(values["tools"])
            if calls > MAX_STEPS:
                raise ValueError(f"step_count: at most {MAX_STEPS} steps per trace")
            values["step_count"] = calls
            given.add("step_count")
        tokens_in, tokens_out = values["tokens_in"], values["tokens_out"]
        if "tokens" not in given and (tokens_in is not None or tokens_out is not None):
            tokens = (tokens_in or 0) + (tokens_out or 0)
            if tokens > MAX_TOKENS:
                raise ValueError(f"tokens: tokens_in + tokens_out ({tokens}) is over "
                                 f"{MAX_TOKENS}")
            values["tokens"] = tokens
            given.add("tokens")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Trace:
        self._fill(info)
        # Fields read from the instance dict, as _fill writes them: an attribute of the
        # model costs about twice a dict lookup, and this runs for every reported trace.
        values = self.__dict__
        # Each name's length and line breaks were checked by its type (ToolName).
        tools = values["tools"]
        calls = len(tools)
        if calls > MAX_STEPS:
            raise ValueError(f"tools: at most {MAX_STEPS} calls per trace")
        # No more distinct names than calls: a short list needs no set built.
        distinct = len(set(tools)) if calls > MAX_DISTINCT_TOOLS else 0
        if distinct > MAX_DISTINCT_TOOLS:
            raise ValueError(f"tools: at most {MAX_DISTINCT_TOOLS} distinct tool names per trace, "
                             f"got {distinct}")
        steps = values["steps"]
        step_count, tool_errors = values["step_count"], values["tool_errors"]
        if steps is not None:
            # List comprehensions, not generators: this runs for every reported trace.
            names = tuple([step.tool for step in steps])
            if tools != names:
                raise ValueError(f"tools: {list(tools)} contradicts the steps {list(names)}")
            if step_count != len(steps):
                raise ValueError(
                    f"step_count: {step_count} contradicts {len(steps)} steps"
                )
            errors = len([step for step in steps if step.error])
            if tool_errors != errors:
                raise ValueError(
                    f"tool_errors: {tool_errors} contradicts {errors} failed steps"
                )
        if step_count < calls:
            raise ValueError(
                f"step_count: {step_count} is fewer than the {calls} tools called"
            )
        if tool_errors > step_count and step_count > 0:
            raise ValueError(
                f"tool_errors: {tool_errors} exceeds step_count {step_count}"
            )
        tokens_in, tokens_out = values["tokens_in"], values["tokens_out"]
        if tokens_in is not None or tokens_out is not None:  # else no split to exceed
            split = (tokens_in or 0) + (tokens_out or 0)
            tokens = values["tokens"]
            if split > tokens:
                raise ValueError(f"tokens: {tokens} is fewer than tokens_in + tokens_out "
                                 f"({split})")
        if steps is not None or values["input"] or values["feedback"]:
            # Most reported runs carry no free-form values: nothing to walk.
            self._free_form_finite()
        return self

    def trajectory(self) -> tuple[str, ...]:
        """The tool sequence as pairing compares it: each parallel group in a fixed order."""
        groups = [step.parallel_group for step in self.steps] if self.steps else []
        return canonical_tools(self.tools, groups)

    def _free_form_finite(self) -> None:
        """Refuse NaN/Infinity in the free-form fields, which allow_inf_nan does not reach.

        Stored, pydantic would write them as null: the run would silently differ
        from what was reported.
        """
        steps = self.steps or ()
        # One walk over everything (the common case: all finite); only a failure
        # walks again, part by part, to name where the bad number is.
        values = [self.input, self.feedback]
        for step in steps:
            values.append(step.args)
            values.append(step.result)
        if _finite(values):
            return
        for name, value in (("input", self.input), ("feedback", self.feedback)):
            if value and not _finite(value):
                raise ValueError(f"{name}: holds NaN or an infinite number, not a JSON number")
        for index, step in enumerate(steps):
            if (step.args and not _finite(step.args)) or not _finite(step.result):
                raise ValueError(f"steps.{index}: holds NaN or an infinite number, "
                                 "not a JSON number")


def _finite(value: Any) -> bool:
    """False when a free-form JSON value holds a NaN or an infinite number anywhere."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is float:
            if node - node != 0.0:  # NaN and +-inf: the fastest test without a call
                return False
        elif kind is dict:
            stack.extend(node.values())
        elif kind is list or kind is tuple:
            stack.extend(node)
    return True


def canonical_tools(tools: Sequence[str], groups: Sequence[str | None]) -> tuple[str, ...]:
    """`tools` with the calls of each parallel group sorted by name within their places.

    Calls issued together may complete in any order; sorting a group's names
    into the positions the group occupies makes every completion order of the
    same calls one sequence, so comparing trajectories treats a group as a set.
    `groups` lines up with `tools` (None: not in a group); shorter means no group.
    """
    if not any(groups):
        return tuple(tools)
    places: dict[str, list[int]] = {}
    for index, group in enumerate(groups[:len(tools)]):
        if group:
            places.setdefault(group, []).append(index)
    out = list(tools)
    for indices in places.values():
        for index, name in zip(indices, sorted(tools[i] for i in indices)):
            out[index] = name
    return tuple(out)


#: The fields producers compute from the run itself (the recorder, span assembly) or the
#: router stamps (`input` and `feedback` have recorder arguments of their own).
MEASURED_FIELDS = frozenset({
    "run_id", "role", "config", "arm", "key", "tools", "steps", "step_count", "tool_errors",
    "answered", "cost_usd", "tokens", "tokens_in", "tokens_out", "latency_s", "artifacts",
    "output_text", "stamps", "time", "error", "judged", "reporter", "rule", "attributes",
    "input", "feedback"})
#: Every other field is one the run declares: `Recorder.mark(name=value)` in the SDK (and
#: so the integrations, which record through it), `rolegate.trace.<name>` on an OTLP run's
#: root span or resource. A field added to Trace is declarable everywhere with no change
#: to any producer.
DECLARED_PREFIX = "rolegate.trace."


def declared_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` checked to be Trace fields a run may declare; ValueError naming any other."""
    problems = [f"{name} (measured, not declared)" if name in MEASURED_FIELDS
                else f"{name} (not a Trace field)" for name in sorted(fields)
                if name in MEASURED_FIELDS or name not in Trace.model_fields]
    if problems:
        raise ValueError("not a field a run declares: " + ", ".join(problems))
    return dict(fields)


def declared_attributes(*sources: Mapping[str, Any]) -> dict[str, Any]:
    """The declared fields OTLP attributes carry (`rolegate.trace.<name>`), later sources
    winning; names that are not declarable are left for the model to ignore."""
    found: dict[str, Any] = {}
    for source in sources:
        for name, value in source.items():
            field_name = name[len(DECLARED_PREFIX):] if name.startswith(DECLARED_PREFIX) else None
            if field_name in Trace.model_fields and field_name not in MEASURED_FIELDS:
                found[field_name] = value
    return found
