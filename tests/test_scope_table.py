"""docs/scopes.md says once which writer may do what, and it is what the router does (issue 33).

The table is generated from the routes' own checks (`router.openapi.scopes`);
here it must equal the file, every route is called with each scope's token (and
the "no token" ones without any) and answered as the table says (a refused scope
gets 403 naming it; an allowed one anything but that), and the OpenAPI
document's scopes agree. A route added, or a check changed, without the table
following fails here.
"""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient

from router.openapi.document import build_spec
from router.openapi.scopes import DOC, ORDER, markdown, scope_rows
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, REVIEWER, auth

TOKEN = {"caller": CALLER, "reviewer": REVIEWER, "gatekeeper": GATEKEEPER,
         "operator": OPERATOR}
#: Path parameters: things of role-a, which exists.
VALUES = {"role": "role-a", "run_id": "a-run", "config": "cfg_a", "a": "cfg_a", "b": "cfg_b",
          "version": "1"}
README = DOC.parents[1] / "README.md"


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """The router with role-a on a canary."""
    client = app.test_client()
    r = client.put("/v1/bindings/role-a", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.5})
    assert r.status_code == 201, r.json
    return client


def test_the_table_is_what_the_code_says(app: Flask) -> None:
    """docs/scopes.md is the generated table, byte for byte, and covers every scope."""
    assert DOC.read_text(encoding="utf-8") == markdown(app), (
        "docs/scopes.md is stale: run python -m router.openapi.scopes")
    assert set(ORDER) == set(TOKEN)


def _url(path: str) -> str:
    url = re.sub(r"\{(\w+)\}", lambda m: VALUES[m.group(1)], path)
    # A watch must answer at once, whoever may make it wait.
    return url + "?timeout=0" if url.endswith("/watch") else url


def test_every_route_answers_each_scope_as_the_table_says(client: FlaskClient) -> None:
    """Each route called with each scope's token: refused (403 naming the scope) exactly
    where the table has no "yes"; a "no token" route answers without one."""
    wrong = []
    for row in scope_rows(client.application):
        url = _url(row.path)
        if row.scopes is None:
            r = client.open(url, method=row.method)
            if r.status_code in (401, 403):
                wrong.append((row.method, row.path, "no token", r.status_code))
            continue
        for scope in ORDER:
            r = client.open(url, method=row.method, headers=auth(TOKEN[scope]), json={})
            body = r.get_json(silent=True) or {}
            # rolegate's Error names the scope; OFREP's own error shape says it in words.
            refused = r.status_code == 403 and (
                (body.get("error") or {}).get("details", {}).get("scope") == scope
                or f"a {scope} token may not call this" in r.get_data(as_text=True))
            if refused == (scope in row.scopes):
                wrong.append((row.method, row.path, scope, r.status_code))
    assert wrong == [], wrong


def test_the_openapi_document_names_the_same_scopes(app: Flask) -> None:
    """The served document's security and "Needs a token of scope ..." are each route's own."""
    spec = build_spec(app)
    wrong = []
    for row in scope_rows(app):
        operation = spec["paths"][row.path][row.method.lower()]
        if operation.get("x-rolegate-generic"):
            continue
        if row.scopes is None:
            if operation["security"] != []:
                wrong.append((row.method, row.path, operation["security"]))
            continue
        said = re.search(r"Needs (?:a token of scope (.*) \(operator may always\)|an operator "
                         r"token)\.", operation.get("description", ""))
        named = set() if said is None or said.group(1) is None else set(
            said.group(1).split(", "))
        if said is None or named | {"operator"} != row.scopes:
            wrong.append((row.method, row.path, operation.get("description"), row.scopes))
    assert wrong == [], wrong


def test_the_readme_points_at_the_table_and_repeats_no_scope_column() -> None:
    """The README's route table says what each route does; who may call it is said once."""
    text = README.read_text(encoding="utf-8")
    assert "docs/scopes.md" in text
    assert "| Method and path | Scope |" not in text
