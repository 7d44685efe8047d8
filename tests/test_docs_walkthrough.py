"""Every Python snippet in README.md and docs/ is complete, and each page's run in order.

A snippet whose first line is a `# illustrative: <why>` (or `// illustrative:`)
comment, or right after a `<!-- illustrative: <why> -->` line, is shown, not run; every other Python block must compile as a module
(no top-level `await`) and name nothing it does not define or import. The
snippets of each page are then run in order, in a fresh process, against a
fresh router serving the example bindings and config bodies (their
`127.0.0.1:8080` / `rolegate:8000` URLs pointed at it), and where a page shows
the output right below a snippet, the printed output must be that.

The integration pages' examples run in tests/test_docs_integrations.py, the
README's rollout in tests/test_readme_rollout.py, the criteria walk-through in
tests/test_docs_criteria.py; this test still checks their snippets are complete.
"""

from __future__ import annotations

import builtins
import re
import subprocess
import symtable
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from router import create_app
from router.cli.serve import load_binding_file, seed_bindings
from router.server.services import services_of
from tests.servers import base_env, werkzeug_server

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
ILLUSTRATIVE = re.compile(r"^\s*(#|//)\s*illustrative:\s*\S")
BEFORE = re.compile(r"<!--\s*illustrative:\s*\S.*-->\s*\n$")
#: Pages whose Python runs in a test of its own (see the module docstring).
RUN_ELSEWHERE = {"integrations"}
URLS = ("http://127.0.0.1:8080", "http://rolegate:8000")


def blocks(page: Path) -> list[tuple[str, str, int]]:
    """(language, body, line) of each fenced block of `page`, in order.

    A block after a `<!-- illustrative: ... -->` line gets that marker as its
    first line, so one test reads both forms.
    """
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[text.rfind("\n", 0, max(m.start() - 1, 0)) + 1:m.start()]
        body = m.group(2)
        if BEFORE.search(before):
            body = "# illustrative: (marked before the block)\n" + body
        found.append((m.group(1), body, text[:m.start()].count("\n") + 1))
    return found


def illustrative(body: str) -> bool:
    """Whether the block's first line marks it as shown, not run."""
    first = body.splitlines()[0] if body.strip() else ""
    return ILLUSTRATIVE.match(first) is not None


def snippets(page: Path) -> list[tuple[str, str | None, int]]:
    """The runnable Python blocks of `page`: (code, the output shown below it or None, line)."""
    found = []
    listed = blocks(page)
    for index, (language, body, line) in enumerate(listed):
        if language != "python" or illustrative(body):
            continue
        after = listed[index + 1] if index + 1 < len(listed) else None
        shown = after[1] if after is not None and after[0] == "" else None
        found.append((body, shown, line))
    return found


ALL = [(page, code, line) for page in PAGES for code, _, line in snippets(page)]


def undefined_names(code: str) -> set[str]:
    """Names the module reads at any depth but never binds at its top level (nor builtins)."""
    top = symtable.symtable(code, "<snippet>", "exec")
    bound = {s.get_name() for s in top.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    known = bound | set(dir(builtins))
    missing: set[str] = set()
    stack = [top]
    while stack:
        table = stack.pop()
        for symbol in table.get_symbols():
            global_read = symbol.is_referenced() and (
                table is top or (symbol.is_global() and not symbol.is_declared_global()))
            if global_read and symbol.get_name() not in known:
                missing.add(symbol.get_name())
        stack.extend(table.get_children())
    return missing


@pytest.mark.parametrize("page, code, line", ALL,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, _, n in ALL])
def test_every_python_snippet_is_complete(page: Path, code: str, line: int) -> None:
    """It compiles as a module (no top-level await) and uses no name it does not define."""
    compile(code, f"{page.name}:{line}", "exec")
    assert undefined_names(code) == set(), f"{page.name}:{line} uses undefined names"


def test_illustrative_blocks_say_why() -> None:
    """A marker carries its reason, and no page hides a runnable snippet without one."""
    for page in PAGES:
        for _, body, line in blocks(page):
            first = body.splitlines()[0] if body.strip() else ""
            if "illustrative" in first.lower() and first.lstrip().startswith(("#", "//")):
                assert illustrative(body), f"{page.name}:{line}: '# illustrative: <why>'"


RUN_PAGES = [page for page in PAGES if snippets(page)
             and not RUN_ELSEWHERE & set(page.relative_to(ROOT).parts)]


@pytest.fixture
def fresh_router(redis_url: str) -> Iterator[str]:
    """An open router (as the quickstart runs it) with the example bindings and bodies."""
    app: Flask = create_app({"redis_url": redis_url, "testing": True,
                             "refresh_interval_s": 0.05})
    try:
        # Loaded as `rolegate serve --seed` loads it: as written, unsalted, so the keys the
        # pages resolve fall where they say (a PUT would draw a salt for each rollout).
        assert seed_bindings(services_of(app).store,
                             load_binding_file(ROOT / "bindings.example.json"), "the example")
        with werkzeug_server(app) as url:
            for body in sorted((ROOT / "examples" / "bodies").glob("*.json")):
                assert requests.put(f"{url}/v1/configs/{body.stem}", data=body.read_bytes(),
                                    headers={"Content-Type": "application/json"},
                                    timeout=5).status_code == 201
            yield url
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


@pytest.mark.slow
@pytest.mark.walkthrough
@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(ROOT)) for p in RUN_PAGES])
def test_each_pages_snippets_run_in_order(page: Path, fresh_router: str,
                                          tmp_path: Path) -> None:
    """Each snippet runs in a fresh process; where the page shows output, it prints that."""
    for number, (code, shown, line) in enumerate(snippets(page)):
        for url in URLS:
            code = code.replace(url, fresh_router)
        script = tmp_path / f"snippet_{number}.py"
        script.write_text(code)
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, check=False, env=base_env())
        assert done.returncode == 0, f"{page.name}:{line}\n{done.stderr[-3000:]}"
        if shown is not None:
            assert done.stdout == shown, f"{page.name}:{line} printed something else"
