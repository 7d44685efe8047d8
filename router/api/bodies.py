"""Reading request bodies: JSON or a clear 400, then a pydantic model or a clear 422.

Python's json module reads more than JSON: NaN, Infinity, numbers too large for
a float (1e400 becomes inf) and lone UTF-16 surrogates ("\\ud800"). None of them
survives being stored: pydantic writes NaN back as null (a stored record then
no longer validates) and a lone surrogate cannot be encoded at all. So they are
refused here, before any model or store sees them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

from flask import current_app, request
from pydantic import BaseModel
from werkzeug.exceptions import RequestEntityTooLarge

from bindings.errors import InvalidInput
from router.server.errors import BadRequest

M = TypeVar("M", bound=BaseModel)

#: Deeper bodies are refused: nothing rolegate takes nests this far, and a deep
#: enough one would exhaust the interpreter's recursion limit in json or jsonify.
MAX_DEPTH = 64
#: A JSON string escape that starts a UTF-16 surrogate (maybe an unpaired one).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _NonFinite(ValueError):
    """A NaN, an Infinity, or a number that overflows a float."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _no_constant(text: str) -> Any:
    raise _NonFinite(text)


def loads(raw: bytes, *, strict: bool = True) -> Any:
    """Parse `raw` as JSON; BadRequest (or InvalidInput for NaN/Infinity) otherwise.

    Not `strict`: NaN, Infinity and unpaired surrogates are let through, for a
    caller that refuses each part of the body holding one on its own (a batch of
    traces, with `unstorable`) instead of the whole body.
    """
    try:
        if strict:
            body = json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
        else:
            body = json.loads(raw)
    except _NonFinite as exc:
        # A 422 like pydantic's own "finite number" error for a float field.
        raise InvalidInput(f"request body holds {exc}, which is not a finite JSON number",
                           value=str(exc)) from None
    except RecursionError:
        raise BadRequest(f"request body nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(body) > MAX_DEPTH:
        raise BadRequest(f"request body nests deeper than {MAX_DEPTH} levels")
    if strict and SURROGATE_ESCAPE.search(raw) and unstorable(body):
        raise BadRequest("request body holds an unpaired UTF-16 surrogate escape "
                         "(\\ud800-\\udfff), which is not text")
    return body


def unstorable(value: Any) -> str | None:
    """Why `value` (parsed JSON) cannot be stored faithfully, or None when it can.

    A NaN or infinite number (pydantic would write null) or a text holding an
    unpaired surrogate (it cannot be encoded as UTF-8 at all).
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return f"{node} is not a finite JSON number"
        elif isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return "a text holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)"
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def depth(value: Any) -> int:
    """How deeply `value` nests lists and objects, without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def refuse_oversized_chunked() -> None:
    """A chunked body over the size limit is 413, like one whose Content-Length says so.

    Werkzeug stops reading a chunked body at MAX_CONTENT_LENGTH without an error,
    so the JSON parser would see a cut body and answer 400 "not valid JSON". The
    body is read here (and cached for the view); one byte more in the stream means
    it was over the limit.
    """
    if request.content_length is not None or request.method in ("GET", "HEAD", "OPTIONS"):
        return
    if "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        return
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    data = request.get_data(cache=True)
    if limit is not None and len(data) >= limit and request.environ["wsgi.input"].read(1):
        raise RequestEntityTooLarge(f"request body is larger than {limit} bytes "
                                    "(ROLEGATE_MAX_BODY_BYTES)")


def json_body(*, allow_empty: bool = True, strict: bool = True) -> Any:
    """The request body parsed as JSON (see `loads`); {} when empty and allowed."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("request body is empty; expected JSON")
    return loads(raw, strict=strict)


def parse(model: type[M], body: Any) -> M:
    """Validate `body` as `model`; a non-object body is a 400, a bad field a 422."""
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    return model.model_validate(body)
