"""Which token scope may call which route: docs/scopes.md, generated from the routes themselves.

Each view guarded by `router.server.auth.require` carries the scopes it lets in
(`required_scopes`, operator always among them); a view without it asks for no
token. `scope_rows` reads them off the app's URL map, `markdown` renders the
table docs/scopes.md holds, and `python -m router.openapi.scopes` writes it.
tests/test_scope_table.py fails when the file differs from what the code says,
when a real call with each scope's token is answered otherwise than the table
says, or when the OpenAPI document's scopes disagree.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from flask import Flask

from router.openapi.document import openapi_path
from router.server.tokens import SCOPES

#: The columns, least privileged first.
ORDER = ("caller", "reviewer", "gatekeeper", "operator")
#: Where the table is kept.
DOC = Path(__file__).resolve().parents[2] / "docs" / "scopes.md"
_SKIPPED = ("static", "dashboard.static")

HEADER = """# Who may call what

Every route of the router and the token scopes it answers, generated from the
routes' own checks (`router/openapi/scopes.py`; regenerate with `python -m
router.openapi.scopes`). tests/test_scope_table.py fails when this table, the
router's real answers to each scope's token, or the OpenAPI document's scopes
disagree. A scope refused gets 403 naming it; a token limited to some roles is
refused (403) at every other role's URL whatever its scope (README, "HTTP API").
"no token" routes answer without one.

"""


@dataclass(frozen=True)
class Row:
    """One route: its method, its OpenAPI path, and the scopes allowed (None: no token)."""

    method: str
    path: str
    scopes: frozenset[str] | None


def scope_rows(app: Flask) -> list[Row]:
    """Every (method, path) of `app` and the scopes its view lets in, sorted by path."""
    rows = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in _SKIPPED or rule.endpoint.endswith(".static"):
            continue
        view = app.view_functions[rule.endpoint]
        scopes = getattr(view, "required_scopes", None)
        path, _ = openapi_path(rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            rows.append(Row(method, path, None if scopes is None else frozenset(scopes)))
    return sorted(rows, key=lambda r: (r.path, r.method))


def markdown(app: Flask) -> str:
    """docs/scopes.md: the table of routes by scope."""
    assert set(ORDER) == set(SCOPES), "a scope the table has no column for"
    lines = ["| Method and path | " + " | ".join(ORDER) + " |",
             "|---|" + "---|" * len(ORDER)]
    for row in scope_rows(app):
        cells = (["no token"] + [""] * (len(ORDER) - 1) if row.scopes is None
                 else ["yes" if scope in row.scopes else "-" for scope in ORDER])
        lines.append(f"| `{row.method} {row.path}` | " + " | ".join(cells) + " |")
    return HEADER + "\n".join(lines) + "\n"


def main() -> int:
    """Write docs/scopes.md from a router app (its routes only: no server is started)."""
    from router import create_app

    app = create_app({"redis_url": "redis://127.0.0.1:1/0", "tokens": "x=y:operator",
                      "testing": True})
    DOC.write_text(markdown(app), encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
