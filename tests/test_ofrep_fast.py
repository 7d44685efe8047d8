"""The OFREP fast path in front of Flask answers exactly as the OFREP views do.

Each case goes once through the fast path and once through the Flask app
alone: status, body, header names, request id, log lines, resolve and request
counters and exposures must match, and the plain cases must not reach Flask.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from router.api.exposures import exposure_counter
from router.api.ofrep_fast import OfrepFastPath, installed
from router.server import logs, metrics
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, TOKENS, auth

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
          "rules": [{"when": {"tenant": ["internal"]}, "arm": "candidate", "name": "staff"}]}
SINGLE = "/ofrep/v1/evaluate/flags/summarizer"
BULK = "/ofrep/v1/evaluate/flags"
RICH = {"targetingKey": "job-9", "tenant": "internal", "groups": ["a", "b"],
        "device": {"os": "linux"}, "app:version": "4.2", "seats": 3}
#: (path, body, headers, answered in front of Flask).
CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    (SINGLE, {"context": {"targetingKey": "job-7"}}, auth(CALLER), True),
    (SINGLE, {"context": RICH}, {**auth(GATEKEEPER), "X-Request-Id": "req-1"}, True),
    (SINGLE, {"context": {"targetingKey": 12}}, auth(OPERATOR), True),
    (BULK, {"context": {"targetingKey": "job-7"}}, auth(CALLER), True),
    (BULK, {"context": RICH}, auth(CALLER), True),
    (BULK, {"context": {"targetingKey": "job-7"}}, {**auth(CALLER), "If-None-Match": "ETAG"},
     True),
    (SINGLE, {"context": {"targetingKey": "job-7"}}, {**auth(CALLER),
                                                      "X-Rolegate-Include": "body"}, False),
    (SINGLE + "?include=body", {"context": {"targetingKey": "job-7"}}, auth(CALLER), False),
    (SINGLE, {"context": {}}, auth(CALLER), False),
    (SINGLE, "{not json", auth(CALLER), False),
    (SINGLE, {"context": {"targetingKey": "job-7"}}, {}, False),
    (SINGLE, {"context": {"targetingKey": "job-7"}}, auth("nobody"), False),
    ("/ofrep/v1/evaluate/flags/nosuchrole", {"context": {"targetingKey": "k"}}, auth(CALLER),
     False),
    (SINGLE, {"context": {"targetingKey": "job-7"}}, {**auth(CALLER),
                                                      "Host": "attacker.example"}, False),
    (SINGLE, {"context": {"targetingKey": "job-7"}}, {**auth(CALLER),
                                                      "Origin": "https://evil.example"}, False),
    (BULK, {"context": {"targetingKey": "k" * 501}}, auth(CALLER), False),
]


class CountingInner:
    """Wraps the Flask WSGI callable and counts the requests handed to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.inner(environ, start_response)


def _ofrep_fast(app: Flask) -> OfrepFastPath:
    found = installed(app)
    assert found is not None
    return found


def _layer_before(app: Flask, fast: OfrepFastPath) -> Any:
    """The WSGI layer whose `inner` is the OFREP fast path."""
    layer: Any = app.wsgi_app
    while layer.inner is not fast:
        layer = layer.inner
    return layer


def _post(client: FlaskClient, path: str, body: Any, headers: dict[str, str]) -> dict[str, Any]:
    data = body if isinstance(body, str) else json.dumps(body)
    r = client.post(path, data=data, headers={"Content-Type": "application/json", **headers})
    request_id = r.headers.get("X-Request-Id")
    # Each evaluation's run id is minted per answer (rolegate.run_ids): compared by shape.
    raw = re.sub(rb'"run_id":"r1\.[0-9a-f]+\.[0-9]+"', b'"run_id":"minted"', r.data)
    body = None if r.get_json(silent=True) is None else json.loads(raw)
    return {"status": r.status_code, "body": body, "raw": raw,
            "headers": sorted(h.lower() for h, _ in r.headers), "etag": r.headers.get("ETag"),
            "content_type": r.headers.get("Content-Type"),
            "request_id": request_id if headers.get("X-Request-Id") == request_id
            else len(request_id or "")}


def _counted(app: Flask) -> dict[str, float]:
    """The exposures, resolves and requests counted since the last call."""
    rows = exposure_counter(app).drain(0.0)
    now: dict[str, float] = {f"resolves.{arm}": metrics.RESOLVES.labels("summarizer", arm)
                             ._value.get() for arm in ("current", "candidate")}
    now.update({status: metrics.REQUESTS.labels(status)._value.get()
                for status in ("2xx", "3xx", "4xx")})
    last: dict[str, float] = app.extensions.setdefault("test_counted", {})
    added = {k: v - last.get(k, 0) for k, v in now.items() if v != last.get(k, 0)}
    last.update(now)
    for row in rows:
        name = f"exposed.{row['role']}.{row['arm']}"
        added[name] = added.get(name, 0) + row["count"]
    return added


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    logs.flush()
    found = [json.loads(x) for x in stream.getvalue().splitlines() if x.strip()]
    stream.truncate(0)
    stream.seek(0)
    volatile = {"ts", "duration_ms", "request_id"}
    return [{k: v for k, v in x.items() if k not in volatile} for x in found]


def test_fast_path_answers_like_the_flask_views(app: Flask, client: FlaskClient,
                                                lines: io.StringIO) -> None:
    """Body, status, headers, log lines, counters and exposures match the views in every case."""
    for role in ("summarizer", "labeler"):
        assert client.put(f"/v1/bindings/{role}", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
    exposure_counter(app).stop()
    fast = _ofrep_fast(app)
    outer = _layer_before(app, fast)
    counting = CountingInner(fast.inner)
    fast.inner = counting
    tag = client.post(BULK, json={"context": {"targetingKey": "job-7"}},
                      headers=auth(CALLER)).headers["ETag"]
    for path, body, given, plain in CASES:
        headers = {k: (tag if v == "ETAG" else v) for k, v in given.items()}
        _counted(app)
        _lines(lines)
        calls = counting.calls
        via_fast = _post(client, path, body, headers)
        handed_on = counting.calls - calls
        fast_counted, fast_lines = _counted(app), _lines(lines)
        outer.inner = counting.inner  # the Flask views alone, behind the other fast paths
        try:
            via_flask = _post(client, path, body, headers)
        finally:
            outer.inner = fast
        flask_counted, flask_lines = _counted(app), _lines(lines)
        assert via_fast == via_flask, (path, headers)
        assert fast_counted == flask_counted, (path, headers)
        assert fast_lines == flask_lines, (path, headers)
        assert handed_on == (0 if plain else 1), (path, headers)
        if plain and via_fast["status"] == 200:
            assert any(k.startswith("exposed.") for k in fast_counted), (path, fast_counted)


def test_unknown_request_hook_turns_the_ofrep_fast_path_off(redis_url: str) -> None:
    """A request hook the fast path does not reproduce sends every evaluation through Flask."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True})
    seen: list[str] = []

    @app.before_request
    def note() -> None:
        seen.append("hook")

    try:
        client = app.test_client()
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        seen.clear()
        r = client.post(SINGLE, json={"context": {"targetingKey": "job-7"}},
                        headers=auth(CALLER))
        assert r.status_code == 200 and seen == ["hook"]
        assert _ofrep_fast(app).enabled() is False
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
