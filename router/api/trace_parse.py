"""Parsing a trace ingest body: the all-valid fast parse, and each item on its own.

`router.api.traces` tries `parse_all_valid` first (pydantic-core straight from
the bytes); when any trace is bad it parses the body as JSON and validates each
item with `parse_each`, so every refusal names its index and reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from rolegate.trace import STAMP, Trace
from router.api.bodies import unstorable
from router.server.errors import BadRequest, validation_details

#: A batch larger than this is refused whole (split it; 500 per POST is plenty).
MAX_BATCH = 10_000


def batch_items(body: Any) -> list[Any]:
    """The traces of a parsed body: one trace, {"traces": [...]} or a bare list; else BadRequest."""
    if isinstance(body, list):
        items = body
    elif isinstance(body, dict) and "traces" in body:
        if set(body) != {"traces"} or not isinstance(body["traces"], list):
            raise BadRequest("a batch body is {\"traces\": [...]} with nothing beside it")
        items = body["traces"]
    elif isinstance(body, dict):
        items = [body]
    else:
        raise BadRequest(f"expected a trace object or {{\"traces\": [...]}}, "
                         f"got {type(body).__name__}")
    if not items:
        raise BadRequest("no traces in the batch")
    if len(items) > MAX_BATCH:
        raise BadRequest(f"at most {MAX_BATCH} traces per request, got {len(items)}",
                         limit=MAX_BATCH)
    return items


def item_refusal(index: int, item: Any, code: str, message: str,
                 details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result of a refused trace: its index, its run id if it has one, and why."""
    run_id = item.get("run_id") if isinstance(item, dict) else None
    return {"index": index, "run_id": run_id if isinstance(run_id, str) else None,
            "status": "refused",
            "error": {"code": code, "message": message, "details": details or {}}}


class _Batch(BaseModel):
    """A batch body, for the all-valid fast path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    traces: list[Trace]


_TRACE_LIST: TypeAdapter[list[Trace]] = TypeAdapter(list[Trace])


def parse_all_valid(raw: bytes, stamp: dict[str, Any] | None = None) -> list[Trace] | None:
    """Every trace of a body in which all are valid, parsed in one pass; else None.

    Validating the raw bytes in pydantic-core skips building Python dicts first.
    NaN and Infinity, which its parser reads, are refused by the Trace model.
    Any failure (bad JSON, a bad trace, an unexpected shape) returns None and the
    request takes the per-trace path, which explains each refusal. `stamp`
    (`{"reporter", "time"}`) is set on each trace as it is validated (`Trace`'s `STAMP`).
    """
    body = raw.lstrip()
    context = None if stamp is None else {STAMP: stamp}
    try:
        if body[:1] == b"[":
            traces = _TRACE_LIST.validate_json(raw, context=context)
        elif body[1:].lstrip().startswith(b'"traces"'):
            traces = _Batch.model_validate_json(raw, context=context).traces
        else:
            traces = [Trace.model_validate_json(raw, context=context)]
    except ValidationError:
        return None
    return traces if 0 < len(traces) <= MAX_BATCH else None


def parse_each(items: list[Any], results: list[dict[str, Any] | str | None], *,
                check_values: bool, stamp: dict[str, Any] | None = None,
                ) -> list[tuple[int, Trace]]:
    """Validate each item on its own, recording a refusal in `results` for each bad one.

    `check_values`: the body may hold an unpaired surrogate (the parse let it
    through), so look for one (or a NaN) in each item first. `stamp` as for
    `parse_all_valid`.
    """
    valid: list[tuple[int, Trace]] = []
    context = None if stamp is None else {STAMP: stamp}
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            results[index] = item_refusal(index, item, "bad_request",
                                      f"a trace must be a JSON object, got {type(item).__name__}")
            continue
        problem = unstorable(item) if check_values else None
        if problem is not None:
            results[index] = item_refusal(index, item, "invalid", problem)
            continue
        if stamp is not None:
            # The server's word replaces the body's before validation: a forged `reporter`
            # is overwritten, never validated (the all-valid parse refuses one it can't take).
            item = {**item, "reporter": stamp["reporter"]}
        try:
            valid.append((index, Trace.model_validate(item, context=context)))
        except ValidationError as exc:
            errors = validation_details(exc)
            message = "; ".join(f"{e['field']}: {e['message']}" if e["field"] else e["message"]
                                for e in errors)
            results[index] = item_refusal(index, item, "invalid", message, {"errors": errors})
    return valid
