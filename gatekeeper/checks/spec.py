"""The agent spec a config can carry: what the agent is told, may do and must produce.

Pure data (no Flask, no Redis). Every requirement that criteria are generated
from has an identity separate from its wording: an instruction's `id`, a schema
path, a tool's name, an escalation rule's `id`. Rewording a requirement keeps
its identity, so its criterion keeps its key and results line up across revisions.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

#: Identities become part of criterion keys; keep them boring and colon-free.
IDENTITY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})

Operator = Literal["eq", "ne", "gt", "ge", "lt", "le", "in", "contains", "exists"]


class Frozen(BaseModel):
    """Base for the spec's models: immutable, unknown keys and NaN/Infinity are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _identity(value: str) -> str:
    if not IDENTITY_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value!r} must be 1-128 characters of letters, digits, '_', '.', '-' "
            "and start with a letter or digit"
        )
    return value


#: A requirement's identity: what its criterion key is made of.
Identity = Annotated[str, Field(pattern=IDENTITY_PATTERN.pattern), AfterValidator(_identity)]


class Instruction(Frozen):
    """One requirement from the system instructions; only a judge can score it."""

    id: Identity
    text: str = Field(min_length=1, max_length=4000)
    #: The judge needs the run's steps (tools, arguments, results) to score it.
    trajectory: bool = False


class Tool(Frozen):
    """An action the agent may take; `required` means every run must call it."""

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=2000)
    required: bool = False


class Clause(Frozen):
    """One test on the job's input: `field` is a dotted path into the trace's `input`."""

    field: str = Field(min_length=1, max_length=500)
    op: Operator = "eq"
    value: Any = None

    @model_validator(mode="after")
    def _value_fits_operator(self) -> Clause:
        if self.op == "in" and not isinstance(self.value, list):
            raise ValueError(f"op 'in' needs a list value, got {type(self.value).__name__}")
        if self.op in ("gt", "ge", "lt", "le") and (
                not isinstance(self.value, int | float) or isinstance(self.value, bool)):
            raise ValueError(f"op {self.op!r} needs a numeric value")
        return self


class EscalationRule(Frozen):
    """When `condition` holds, the agent must call `tool` and/or give `answer`.

    `condition` is the human wording; `when` (all clauses must hold) makes the rule
    checkable without a judge. Without `when`, only the judge can tell whether the
    rule applied.
    """

    id: Identity
    condition: str = Field(min_length=1, max_length=2000)
    when: tuple[Clause, ...] = ()
    tool: str | None = Field(None, min_length=1, max_length=200)
    answer: str | None = Field(None, min_length=1, max_length=2000)
    #: Dotted path of the output field that must equal `answer`; else `answer`
    #: must appear in the output text.
    answer_field: str | None = Field(None, min_length=1, max_length=500)

    @model_validator(mode="after")
    def _demands_something(self) -> EscalationRule:
        if self.tool is None and self.answer is None:
            raise ValueError(f"escalation rule {self.id!r} must demand a tool or an answer")
        if self.answer_field is not None and self.answer is None:
            raise ValueError(f"escalation rule {self.id!r}: answer_field needs an answer")
        return self


class KnowledgeRef(Frozen):
    """A document of the agent's knowledge base its answers must agree with."""

    id: Identity
    title: str = Field(min_length=1, max_length=500)
    uri: str = Field("", max_length=2000)
    #: The judge needs the run's steps (what the agent looked up) to score it.
    trajectory: bool = False


class Spec(Frozen):
    """Everything criteria are generated from: instructions, schema, tools, rules, knowledge."""

    #: Free-form system prompt; kept for the judge, generates no criterion by itself.
    system: str = Field("", max_length=100_000)
    instructions: tuple[Instruction, ...] = ()
    #: A JSON Schema for structured output (objects, `properties`, `required`, `type`).
    output_schema: dict[str, Any] | None = None
    #: None means "no allowlist"; an empty tuple means "no tool may be called".
    tools: tuple[Tool, ...] | None = None
    escalation: tuple[EscalationRule, ...] = ()
    knowledge: tuple[KnowledgeRef, ...] = ()

    @field_validator("output_schema")
    @classmethod
    def _schema_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check_schema(value, "output_schema")
        return value

    @model_validator(mode="after")
    def _identities_unique(self) -> Spec:
        for label, ids in (
            ("instructions", [i.id for i in self.instructions]),
            ("tools", [t.name for t in self.tools or ()]),
            ("escalation", [r.id for r in self.escalation]),
            ("knowledge", [k.id for k in self.knowledge]),
        ):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"{label}: ids must be unique, {dupes} repeat")
        if self.tools is not None:
            allowed = {t.name for t in self.tools}
            for rule in self.escalation:
                if rule.tool is not None and rule.tool not in allowed:
                    raise ValueError(
                        f"escalation rule {rule.id!r} demands tool {rule.tool!r}, "
                        "which is not among the allowed tools"
                    )
        return self


def _check_schema(schema: Any, where: str) -> None:
    """Refuse the schema shapes criteria generation would misread (bad types, required)."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON object")
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    for item in kinds:
        if not isinstance(item, str) or item not in JSON_TYPES:
            raise ValueError(f"{where}.type: {item!r} is not a JSON Schema type")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise ValueError(f"{where}.enum must be a list of values")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise ValueError(f"{where}.properties must be an object")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{where}.required must be a list of names")
    for name, sub in properties.items():
        _check_schema(sub, f"{where}.properties.{name}")


def lookup(data: Any, path: str | list[str]) -> tuple[bool, Any]:
    """Follow a dotted path (or a list of names) into nested dicts: (found, value)."""
    parts = path.split(".") if isinstance(path, str) else path
    node = data
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def holds(field: str, op: str, expected: Any, data: dict[str, Any]) -> bool:
    """Whether a clause, given as its parts (as a criterion's params store them), holds for
    the job input `data` (a missing field never matches)."""
    found, value = lookup(data, field)
    if op == "exists":
        return found if expected in (None, True) else not found
    if not found:
        return False
    if op == "eq":
        return bool(value == expected)
    if op == "ne":
        return bool(value != expected)
    if op == "in":
        return bool(value in expected)
    if op == "contains":
        return _contains(value, expected)
    # Numeric comparisons: bool is an int in Python but never a number here.
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return bool({
        "gt": value > expected, "ge": value >= expected,
        "lt": value < expected, "le": value <= expected,
    }[op])


def _contains(value: Any, expected: Any) -> bool:
    """`expected in value` for a text, list or object field; False where Python would raise.

    The clause's value is whatever JSON the spec gave: a number is never inside a
    text, and a list is never an object's key (unhashable), rather than a TypeError
    that would fail every gate view of the role.
    """
    if isinstance(value, list):
        return expected in value
    if isinstance(value, str | dict):
        return isinstance(expected, str) and expected in value
    return False
