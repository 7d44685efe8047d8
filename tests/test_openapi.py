"""/openapi.json: a 3.1 document covering every route, checked by schemathesis on a live server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from router.openapi.document import build_spec
from tests.conftest import OPERATOR, TOKENS
from tests.servers import base_env, gunicorn

#: Long-polls hold a request for seconds by design; fuzzing them only slows the run.
SLOW_OPERATIONS = ("/v1/bindings/watch",)


def test_spec_is_openapi_31_and_describes_every_route(app: Flask, client: FlaskClient) -> None:
    """Every route the app serves is in the spec with its own description, not a generic one."""
    r = client.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json
    assert spec["openapi"] == "3.1.0"
    generic = [f"{method.upper()} {path}" for path, ops in spec["paths"].items()
               for method, op in ops.items() if op.get("x-rolegate-generic")]
    assert generic == [], f"routes without an OpenAPI description: {generic}"
    served = {rule.rule for rule in app.url_map.iter_rules() if rule.endpoint != "static"
              and not rule.endpoint.endswith(".static")}
    assert len(spec["paths"]) == len(served)


def test_spec_refs_resolve(app: Flask) -> None:
    """Every $ref in the document points at a component that exists."""
    spec = build_spec(app)

    def refs(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    yield value
                else:
                    yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    for ref in refs(spec):
        kind, _, key = ref.removeprefix("#/components/").partition("/")
        assert key in spec["components"][kind], ref


#: Cases per operation and phase: with the coverage phase's deterministic cases this
#: is well over 1,000 requests in about a minute. More: ROLEGATE_FUZZ_EXAMPLES=200.
EXAMPLES = int(os.environ.get("ROLEGATE_FUZZ_EXAMPLES", "5"))
MIN_CASES = 1000
SCHEMATHESIS_CONFIG = Path(__file__).resolve().parent / "schemathesis.toml"


@pytest.fixture(scope="module")
def gunicorn_router(redis_server: str, redis_db: int) -> Iterator[str]:
    """Real gunicorn (two workers) on the session's Redis, emptied before and after."""
    url = f"{redis_server}/{redis_db}"
    connection = redis.Redis.from_url(url)
    connection.flushdb()
    env = base_env(REDIS_URL=url, ROLEGATE_TOKENS=TOKENS, ROLEGATE_LOG_LEVEL="warning",
                   ROLEGATE_LOG_RESOLVES="0", ROLEGATE_INGEST_QUOTA="traces=0,bytes=0")
    try:
        with gunicorn(env, workers=2) as base:
            yield base
    finally:
        connection.flushdb()
        connection.close()


@pytest.mark.slow
def test_schemathesis_with_every_check_finds_nothing(gunicorn_router: str,
                                                    tmp_path: Path) -> None:
    """`schemathesis run --checks all` over 1,000+ cases: no 5xx, no drift from the schema."""
    argv = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(SCHEMATHESIS_CONFIG),
            "run", f"{gunicorn_router}/openapi.json", "--checks", "all",
            "--max-examples", str(EXAMPLES), "--seed", "14", "--no-color",
            # A generous bound per request: CI shares two cores, and a case may be a
            # 1,000-trace batch; a slow answer is not what this test looks for. `--checks
            # all` includes max_response_time, whose default limit is 10 s: the same 60.
            "--request-timeout", "60", "--max-response-time", "60",
            "--exclude-path", SLOW_OPERATIONS[0],
            "--header", f"Authorization: Bearer {OPERATOR}",
            "--report", "junit", "--report-dir", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          check=False, env={**os.environ, "NO_COLOR": "1"})
    output = done.stdout + done.stderr
    generated = re.search(r"(\d+) generated", output)
    # The failures, with the long generated bodies in them cut short.
    report = "\n".join(line[:400] for line in output.splitlines())
    # schemathesis prints a FAILURES section for checks that failed, an ERRORS one for
    # operations it could not test at all: show whichever came first.
    found = [at for at in (report.find("FAILURES"), report.find("ERRORS")) if at >= 0]
    assert done.returncode == 0, report[min(found, default=0):][:12000]
    assert generated is not None and int(generated.group(1)) >= MIN_CASES, output[-3000:]


def test_number_bounds_use_json_schema_names(client: FlaskClient) -> None:
    """No number in the document carries pydantic's ge/le/gt/lt: clients would ignore them."""
    spec = client.get("/openapi.json").json

    def walk(node: Any, path: str) -> Iterator[str]:
        if isinstance(node, dict):
            if node.get("type") in ("integer", "number"):
                for key in ("ge", "le", "gt", "lt"):
                    if key in node:
                        yield f"{path}.{key}"
            for key, value in node.items():
                yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, f"{path}[{index}]")

    assert list(walk(spec, "$")) == []
    to_version = spec["components"]["schemas"]["RollbackRequest"]["properties"]["to_version"]
    assert {"minimum": 1, "type": "integer"} in to_version["anyOf"]
