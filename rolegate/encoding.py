"""A trace as the JSON bytes the reporter sends, with the one documented coercion.

`report()` encodes in the caller's thread, so the sender only ever holds bytes it
can send. A value JSON has no form for (an object of the caller's own class in a
tool result, bytes that are not UTF-8) would otherwise fail the encoding; it is
sent as its `repr()` (at most 1,000 characters), bytes as URL-safe base64.
"""

from __future__ import annotations

import base64
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from rolegate.trace import Step, Trace


def encode(trace: Trace) -> tuple[bytes, bool]:
    """The trace's JSON, and whether a value had to be coerced to encode it.

    The coercion, documented: a value JSON has no form for is sent as its
    `repr()` (at most 1,000 characters); bytes that are not UTF-8 as URL-safe base64.
    """
    try:
        return trace.model_dump_json(exclude_none=True).encode(), False
    except PydanticSerializationError:
        pass
    steps = tuple(_coerced_step(step) for step in trace.steps) if trace.steps else trace.steps
    fixed = trace.model_copy(update={
        "steps": steps, "input": _jsonable(trace.input), "feedback": _jsonable(trace.feedback)})
    return fixed.model_dump_json(exclude_none=True).encode(), True


def _coerced_step(step: Step) -> Step:
    return step.model_copy(update={"args": _jsonable(step.args),
                                   "result": _jsonable(step.result)})


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=_describe, bytes_mode="base64")


def _describe(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.urlsafe_b64encode(bytes(value)).decode()
    return repr(value)[:1000]
