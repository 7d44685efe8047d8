"""/openapi.json: a 3.1 document covering every route, checked by schemathesis on a live server."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import redis
import schemathesis
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from werkzeug.serving import BaseWSGIServer, make_server

from router import create_app
from router.openapi.document import build_spec
from tests.conftest import OPERATOR, TOKENS, auth

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
#: Long-polls hold a request for seconds by design; fuzzing them only slows the run.
SLOW_OPERATIONS = ("/v1/bindings/watch",)
#: Examples per operation and mode: enough to hit each status, small enough for < 60 s.
EXAMPLES = int(os.environ.get("ROLEGATE_FUZZ_EXAMPLES", "10"))


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


@pytest.fixture(scope="module")
def live_router(redis_server: str, redis_db: int) -> Iterator[str]:
    """The router on a loopback port, served by werkzeug in a thread, on an empty database."""
    url = f"{redis_server}/{redis_db}"
    connection = redis.Redis.from_url(url)
    connection.flushdb()
    app = create_app({"redis_url": url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05})
    server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
        connection.flushdb()
        connection.close()


@pytest.fixture(scope="module")
def api_schema(live_router: str) -> schemathesis.BaseSchema:
    """The schema as the live router serves it."""
    return schemathesis.openapi.from_url(f"{live_router}/openapi.json")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, FailureGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return str(exc)[:1500]


def _exercise(operation: schemathesis.APIOperation, mode: GenerationMode, base_url: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize="ROLEGATE_FUZZ_EXAMPLES" not in os.environ,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=base_url, headers=auth(OPERATOR), checks=CHECKS)

    check()


@pytest.mark.slow
def test_api_conforms_to_spec(api_schema: schemathesis.BaseSchema, live_router: str) -> None:
    """No generated request, valid or not, gets a 5xx or an answer the spec does not describe."""
    failures: list[str] = []
    tried = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        if operation.path in SLOW_OPERATIONS:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            tried += 1
            try:
                _exercise(operation, mode, live_router)
            except Unsatisfiable:
                # No parameter or body to break: nothing negative to send.
                assert mode is GenerationMode.NEGATIVE, operation.label
            except (Failure, FailureGroup) as exc:
                failures.append(f"{operation.label} [{mode.value}]: {_describe(exc)}")
    assert tried >= 20
    assert not failures, "\n\n".join(failures)
