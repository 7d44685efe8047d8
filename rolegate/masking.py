"""Masking: a caller's function applied to what a trace carries before it leaves the agent.

    client = Client(url, token, mask=redact)   # redact(value) -> value

`Client.report` (every recorder, every integration and the OpenTelemetry
processor report through it) passes the trace's `input`, `output_text` and each
step's `args` and `result` through `mask` before the trace is queued, so
neither the router, the trace store nor the online judge ever holds the raw
value. Fail closed: when `mask` raises, the field becomes `FAILED`, never the
raw value (Langfuse's SDK does the same). `input` and `args` are JSON objects
in the trace schema, so a value that is not one (`FAILED` included) is kept as
`{"masked": value}`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from rolegate.trace import Trace

#: What a field becomes when the mask raised on it.
FAILED = "<masking failed>"
#: The key a non-object masked value of `input` or `args` is kept under.
MASKED_KEY = "masked"

Mask = Callable[[Any], Any]

log = logging.getLogger("rolegate.masking")


def _apply(mask: Mask, value: Any, field: str) -> Any:
    """`mask(value)`, or FAILED when it raises (the raw value never passes)."""
    try:
        return mask(value)
    except Exception as exc:  # noqa: BLE001 - any failure of the caller's function fails closed
        # The type only: the message may quote the very value being masked.
        log.warning("mask raised %s on a trace's %s: the field is sent as %r",
                    type(exc).__name__, field, FAILED)
        return FAILED


def _as_object(value: Any) -> dict[str, Any]:
    """A masked input or args value as the JSON object the trace schema wants."""
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return {MASKED_KEY: value}


def mask_trace(trace: Trace | Mapping[str, Any], mask: Mask) -> Trace:
    """`trace` with its input, output, tool arguments and results passed through `mask`.

    When what the mask returned does not make a valid trace (NaN, an object JSON
    cannot hold), every masked field becomes FAILED: the raw values never go.
    """
    data = (trace.model_dump(exclude_none=True) if isinstance(trace, Trace)
            else dict(trace))
    try:
        return Trace.model_validate(_masked(data, mask))
    except ValidationError:
        log.warning("the masked trace is not a valid trace: every masked field is sent as %r",
                    FAILED)
        return Trace.model_validate(_masked(data, _refuse))


def _refuse(value: Any) -> Any:
    raise ValueError("masked value refused")


def _masked(data: dict[str, Any], mask: Mask) -> dict[str, Any]:
    data = dict(data)
    if data.get("input") is not None:
        data["input"] = _as_object(_apply(mask, data["input"], "input"))
    text = data.get("output_text")
    if text:
        masked = _apply(mask, text, "output")
        data["output_text"] = masked if isinstance(masked, str) else str(masked)
    steps = data.get("steps")
    if steps:
        out = []
        for step in steps:
            step = dict(step)
            if step.get("args"):
                step["args"] = _as_object(_apply(mask, step["args"], "tool arguments"))
            if step.get("result") is not None:
                step["result"] = _apply(mask, step["result"], "tool result")
            out.append(step)
        data["steps"] = out
    return data
