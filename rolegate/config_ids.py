"""The config-id rule: one definition for bindings, the config registry, traces and URLs.

A config id names a prompt, model and tool set (`summarizer@2026-10-02`,
`refunds_v1`). It travels as a URL path segment (`/v1/configs/<config>`), inside
Redis key names and on one line of a log or a CLI table, so it may hold any
character except the few that cannot survive those trips: a '/' (a path
segment ends there, and a percent-encoded one is decoded before routing),
whitespace or a control character (it would split or forge a line), and it may
not be '.' or '..' (HTTP clients fold those path segments away). Everything
else a binding accepted before this rule existed still is.

The rule guards what comes in. A record stored before it existed (a binding,
a trace) is read back with the `STORED` validation context and keeps loading,
and a binding moves its existing ids around (candidate to current) the same
way: a rollback never fails on an id that was accepted when it was written.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo

MAX_CONFIG_ID = 200
#: Validation context key: true while reading back (or re-validating) stored records.
STORED = "stored"
#: One character of a config id: not '/', whitespace, or a C0/C1 control character.
_CHAR = r"[^/\s\x00-\x1f\x7f-\x9f]"
_NOT_DOT = r"[^/\s\x00-\x1f\x7f-\x9f.]"
#: The whole rule as one regular expression (Python and ECMA-262 alike, so the
#: OpenAPI document states the same rule): at least one non-dot character, or
#: three or more dots; the length bound is checked beside it.
CONFIG_ID_PATTERN = re.compile(rf"^(?:{_CHAR}*{_NOT_DOT}{_CHAR}*|\.{{3,}})$")
CONFIG_ID_RULE = ("1-200 characters, none of them '/', whitespace or a control character, "
                  "and not '.' or '..'")


def config_id_problem(value: str) -> str | None:
    """Why `value` is not a usable config id, or None when it is one."""
    if not 1 <= len(value) <= MAX_CONFIG_ID:
        return f"config id must be 1-{MAX_CONFIG_ID} characters, got {len(value)}"
    # fullmatch: '$' alone would let a trailing line break through.
    if CONFIG_ID_PATTERN.fullmatch(value) is None:
        return f"config id {value!r} must be {CONFIG_ID_RULE}"
    return None


def validate_config_id(value: str) -> str:
    """Return `value` if it is a usable config id, else raise ValueError saying why."""
    problem = config_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


#: Config ids that passed the rule lately. Every reported trace names one of a few
#: configs: the rule's regular expression then runs once per config, not per trace.
_ACCEPTED: dict[str, None] = {}
_ACCEPTED_MAX = 4096


def _incoming_config_id(value: str, info: ValidationInfo) -> str:
    """The rule for values coming in; stored ones (context `STORED`) pass as they are."""
    if value in _ACCEPTED:
        return value
    context = info.context
    if isinstance(context, dict) and context.get(STORED):
        return value
    validate_config_id(value)
    if len(_ACCEPTED) >= _ACCEPTED_MAX:
        _ACCEPTED.clear()  # bounded: ids made up by a client never grow it past this
    _ACCEPTED[value] = None
    return value


#: A config id field in a pydantic model: the length as a field constraint (the
#: usual message), then the characters.
ConfigId = Annotated[str, Field(min_length=1, max_length=MAX_CONFIG_ID,
                                json_schema_extra={"pattern": CONFIG_ID_PATTERN.pattern}),
                     AfterValidator(_incoming_config_id)]
