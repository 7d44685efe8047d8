"""A role's record in the client's snapshot, as far as routing reads it: the wire models of
`GET /v1/bindings`' slim view (arms, shares, rules, bucketing, tool rules), validated
leniently (extra fields ignored) so a newer router's answer still loads, and the
precompiled tool gate.

Pure data: imported by `rolegate.snapshot`, which compiles these into its entries.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rolegate.routing import BUCKET_VERSIONS, SALT_PATTERN, Stage


class ToolRules(BaseModel):
    """The invariants that decide whether a tool may be called at all."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    forbidden_tools: tuple[str, ...] = ()
    #: None: no allowlist; a tuple (even empty): only these tools.
    allowed_tools: tuple[str, ...] | None = None


class RoutedGate(BaseModel):
    """The part of a role's gate policy the client enforces before a tool runs."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    invariants: ToolRules = ToolRules()


class RoutedRule(BaseModel):
    """A targeting rule as routing reads it (`bindings.models.Rule` validates it in full)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    when: dict[str, tuple[str, ...]]
    arm: Literal["current", "candidate"]
    name: str | None = None


class RoutedBinding(BaseModel):
    """The fields of a binding that decide an arm, and its tool rules; the service validates the rest."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    current: str
    candidate: str | None = None
    stage: Stage = Stage.STABLE
    share: float = Field(0.0, ge=0.0, le=1.0)
    #: Absent from an older router's snapshot, which held nothing back.
    holdback: float = Field(0.0, ge=0.0, le=1.0)
    gate: RoutedGate = RoutedGate()
    rules: tuple[RoutedRule, ...] = ()
    #: The stage's start: exposures are counted under its epoch.
    stage_since: float | None = None
    #: Absent from an older router's snapshot, which bucketed by key, unsalted, version 1.
    bucket_by: str | None = None
    salt: str | None = Field(None, pattern=SALT_PATTERN)
    bucket_version: int = 1

    @property
    def known_bucketing(self) -> bool:
        """Whether this SDK knows the binding's bucketing version (a newer router's may not)."""
        return self.bucket_version in BUCKET_VERSIONS


class ToolGate:
    """A role's tool rules, precompiled: `allows(tool)` is one or two set lookups."""

    __slots__ = ("allowed", "forbidden")

    def __init__(self, rules: ToolRules) -> None:
        self.forbidden = frozenset(rules.forbidden_tools)
        self.allowed = None if rules.allowed_tools is None else frozenset(rules.allowed_tools)

    def allows(self, tool: str) -> bool:
        """False for a forbidden tool or one outside the allowlist, as the gate judges a run."""
        if tool in self.forbidden:
            return False
        return self.allowed is None or tool in self.allowed


#: The gate of every role without tool rules (most roles): one object, not one per role.
NO_TOOL_RULES = ToolRules()
ALLOW_ALL = ToolGate(NO_TOOL_RULES)


class RoutedRecord(BaseModel):
    """One role's record in `GET /v1/bindings`, as far as routing reads it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: str
    version: int = Field(ge=1)
    binding: RoutedBinding
