"""The resolve fast path in front of Flask answers exactly as the Flask view does."""

from __future__ import annotations

import io
import json
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from rolegate.run_ids import is_minted
from router.api.resolve_fast import ResolveFastPath
from router.server import logs, metrics
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth

#: Bucketed by tenant, with a rule on region: the attributes decide the answer.
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
          "bucket_by": "tenant", "rules": [{"when": {"region": ["eu"]}, "arm": "candidate"}]}
#: (path, headers): plain resolves the fast path answers (the first PLAIN), and requests it
#: hands to Flask.
CASES: list[tuple[str, dict[str, str]]] = [
    ("/v1/resolve/summarizer?key=job-7", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-8", {**auth(GATEKEEPER), "X-Request-Id": "req-1"}),
    ("/v1/resolve/summarizer?key=a.b~c:d@e-f_9", auth(OPERATOR)),
    ("/v1/resolve/summarizer?key=x", {**auth(CALLER), "X-Request-Id": 'bad" id'}),
    *[(f"/v1/resolve/summarizer?key=job-7&attr.tenant=t{n}", auth(CALLER)) for n in range(4)],
    ("/v1/resolve/summarizer?key=job-7&attr.tenant=acme&attr.region=eu", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7&attr.region=us&attr.a.b-c_d=x~y", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7&attr.tenant=a&attr.tenant=b", auth(CALLER)),
    ("/v1/resolve/summarizer?attr.tenant=acme&key=job-7", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7&attr.tenant=", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7&attr.bad%20name=x", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7&attr.tenant=a%20b", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job%207", auth(CALLER)),
    ("/v1/resolve/summarizer?key=k&other=1", auth(CALLER)),
    ("/v1/resolve/summarizer?key=" + "k" * 501, auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7", {}),
    ("/v1/resolve/summarizer?key=job-7", auth("nobody")),
    ("/v1/resolve/summarizer?key=job-7", {"Authorization": f"Basic {CALLER}"}),
    ("/v1/resolve/nosuchrole?key=job-7", auth(CALLER)),
    ("/v1/resolve/summarizer/extra?key=job-7", auth(CALLER)),
    ("/v1/resolve/summarizer?key=job-7", {**auth(CALLER), "Host": "attacker.example"}),
]
PLAIN = 10


class CountingInner:
    """Wraps the Flask WSGI callable and counts the requests handed to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.inner(environ, start_response)



def _fast(app: Flask) -> ResolveFastPath:
    fast = app.wsgi_app
    assert isinstance(fast, ResolveFastPath)
    return fast


def _answer(client: FlaskClient, path: str, headers: dict[str, str]) -> dict[str, Any]:
    r = client.get(path, headers=headers)
    body = r.get_json(silent=True)
    names = sorted(h.lower() for h, _ in r.headers if h.lower() != "x-rolegate-worker")
    return {"status": r.status_code, "body": body, "headers": names,
            "content_type": r.headers.get("Content-Type"),
            "request_id": r.headers.get("X-Request-Id"),
            "worker": r.headers.get("X-Rolegate-Worker")}


def _comparable(answer: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The answer with what is drawn per request (key, request id) reduced to its shape."""
    out = dict(answer)
    body = answer["body"]
    if isinstance(body, dict) and "run_id" in body:
        # Minted per resolve (rolegate.run_ids): each path's its own, of one shape.
        assert is_minted(body["run_id"]), body
        out["body"] = {**body, "run_id": "minted"}
    if answer["request_id"] and headers.get("X-Request-Id") != answer["request_id"]:
        assert len(answer["request_id"]) == 32  # drawn here: 16 random bytes in hex
        out["request_id"] = "drawn"
    return out


def test_fast_path_answers_like_the_flask_view(app: Flask, client: FlaskClient,
                                               lines: io.StringIO) -> None:
    """Body, status, headers, log lines and counters match the Flask view for every case."""
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    fast = _fast(app)
    counting = CountingInner(fast.inner)
    fast.inner = counting
    for path, headers in CASES:
        before = metrics.RESOLVES.labels("summarizer", "current")._value.get() + \
            metrics.RESOLVES.labels("summarizer", "candidate")._value.get()
        logs.flush()
        lines.truncate(0)
        lines.seek(0)
        calls = counting.calls
        via_fast = _answer(client, path, headers)
        handed_on = counting.calls - calls
        logs.flush()
        fast_lines = [json.loads(x) for x in lines.getvalue().splitlines() if x.strip()]
        lines.truncate(0)
        lines.seek(0)
        app.wsgi_app = counting  # type: ignore[method-assign]  # the Flask view alone
        try:
            via_flask = _answer(client, path, headers)
        finally:
            app.wsgi_app = fast  # type: ignore[method-assign]
        logs.flush()
        flask_lines = [json.loads(x) for x in lines.getvalue().splitlines() if x.strip()]
        after = metrics.RESOLVES.labels("summarizer", "current")._value.get() + \
            metrics.RESOLVES.labels("summarizer", "candidate")._value.get()
        assert _comparable(via_fast, headers) == _comparable(via_flask, headers), path
        assert via_fast["worker"] == via_flask["worker"]
        volatile = {"ts", "duration_ms", "request_id"}
        assert [{k: v for k, v in x.items() if k not in volatile} for x in fast_lines] == \
            [{k: v for k, v in x.items() if k not in volatile} for x in flask_lines], path
        if via_fast["status"] == 200:
            assert after - before == 2, path  # one resolve counted by each path
            assert [x["type"] for x in fast_lines] == ["decision", "request"]
        # The plain cases come first: answered in front of Flask; the rest handed on.
        assert handed_on == (0 if (path, headers) in CASES[:PLAIN] else 1), path


def test_unknown_request_hook_turns_the_fast_path_off(redis_url: str) -> None:
    """A request hook the fast path does not reproduce sends every resolve through Flask."""
    from router import create_app
    from tests.conftest import TOKENS

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
        r = client.get("/v1/resolve/summarizer?key=job-7", headers=auth(CALLER))
        assert r.status_code == 200 and seen == ["hook"]
        assert _fast(app).enabled() is False
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_a_role_created_on_another_worker_resolves_at_once(redis_url: str) -> None:
    """A worker whose table loaded before a role existed reads that role from Redis, not 404."""
    from router import create_app
    from tests.conftest import TOKENS

    config = {"redis_url": redis_url, "tokens": TOKENS, "testing": True,
              "refresh_interval_s": 1.0}
    serving, writing = create_app(config), create_app(config)
    try:
        serving.extensions["rolegate"].cache.start()  # loaded at worker start: no roles yet
        assert serving.extensions["rolegate"].cache.all()[0] == {}
        assert writing.test_client().put("/v1/bindings/summarizer", json=CANARY,
                                         headers=auth(OPERATOR)).status_code == 201
        r = serving.test_client().get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
        assert r.status_code == 200 and r.json["version"] == 1
        missing = serving.test_client().get("/v1/resolve/nosuch?key=k", headers=auth(CALLER))
        assert missing.status_code == 404
    finally:
        for app in (serving, writing):
            app.extensions["rolegate"].cache.stop()
            app.extensions["rolegate"].redis.close()
