"""Reading request bodies: JSON or a clear 400, then a pydantic model or a clear 422."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel

from router.errors import BadRequest

M = TypeVar("M", bound=BaseModel)


def json_body(*, allow_empty: bool = True) -> Any:
    """The request body parsed as JSON; {} when empty and allowed; BadRequest otherwise."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("request body is empty; expected JSON")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


def parse(model: type[M], body: Any) -> M:
    """Validate `body` as `model`; a non-object body is a 400, a bad field a 422."""
    if not isinstance(body, dict):
        raise BadRequest(f"request body must be a JSON object, got {type(body).__name__}")
    return model.model_validate(body)
