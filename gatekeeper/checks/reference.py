"""Scoring a candidate's output against a case's reference result.

Pure. Structured references (a JSON object or list) are compared field by field:
every leaf of the reference must be present in the output with an equal value;
fields the reference does not mention are ignored. A text reference cannot be
compared this way and is left to the judge (`mode == "judge"`, no score).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

from gatekeeper.checks.criteria import MISSING, parse_output

Mode = Literal["fields", "judge"]


@dataclass(frozen=True)
class ReferenceScore:
    """How an output compares with the reference, leaf by leaf."""

    mode: Mode
    #: Reference leaf path ("/customer/id", "/items/0") -> matched.
    fields: dict[str, bool]

    @property
    def matched(self) -> int:
        """Leaves that matched."""
        return sum(self.fields.values())

    @property
    def score(self) -> float | None:
        """Share of the reference's leaves matched; None when the judge must decide."""
        if self.mode == "judge":
            return None
        return self.matched / len(self.fields) if self.fields else 1.0

    @property
    def mismatches(self) -> list[str]:
        """The leaf paths that did not match."""
        return [path for path, ok in self.fields.items() if not ok]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"mode": self.mode, "score": self.score, "matched": self.matched,
                "total": len(self.fields), "mismatches": self.mismatches}


def structured(expected: Any) -> Any:
    """The reference as JSON data when it is structured (object or list), else MISSING."""
    value = parse_output(expected) if isinstance(expected, str) else expected
    return value if isinstance(value, dict | list) else MISSING


def score(output_text: str, expected: Any) -> ReferenceScore:
    """Compare `output_text` with the reference `expected` (JSON text, data, or plain text)."""
    reference = structured(expected)
    if reference is MISSING:
        return ReferenceScore(mode="judge", fields={})
    output = parse_output(output_text)
    return ReferenceScore(mode="fields", fields={
        path: _equal(_at(output, path), value) for path, value in _leaves(reference, "")
    })


def _leaves(value: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        return [leaf for key, sub in value.items() for leaf in _leaves(sub, f"{prefix}/{key}")]
    if isinstance(value, list) and value:
        return [leaf for i, sub in enumerate(value) for leaf in _leaves(sub, f"{prefix}/{i}")]
    return [(prefix or "/", value)]


def _at(data: Any, path: str) -> Any:
    if path == "/":
        return data
    node = data
    for part in path.split("/")[1:]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def _equal(got: Any, want: Any) -> bool:
    if got is MISSING:
        return False
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(want, str) and isinstance(got, str):
        # Whitespace at the ends is formatting, not content.
        return got.strip() == want.strip()
    return bool(json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True))
