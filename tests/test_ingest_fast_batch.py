"""Trace batches stored in front of Flask answer exactly as the Flask view does (issue 38).

Each body is posted twice, once with the ingest fast path in front of Flask and
once to Flask alone, and the two answers (status, body, headers), log lines,
counters and stored traces are compared. Bodies the fast path does not store it
hands to the view (counted by `CountingInner`), which must answer them unchanged.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from bindings.errors import OutcomeUnknown, RolegateError
from gatekeeper.store.traces import TraceStore
from router import create_app
from router.api.ingest_fast import IngestFastPath
from router.api.resolve_fast import ResolveFastPath
from router.server import access, logs, metrics
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.test_ingest_fast import CANARY, SCOPED, _trace
from tests.test_resolve_fast import CountingInner

MINIMAL = {"Prefer": "return=minimal"}
#: Replaced by "VIA" in what is compared: the run ids of the two posts differ by it alone
#: (and are as long: error messages give offsets in the body).
TAGS = {"fast": "VIAfast", "flask": "VIAflsk"}


def _batch(*traces: dict[str, Any]) -> dict[str, Any]:
    return {"traces": list(traces)}


def _good(tag: str, n: int = 3) -> list[dict[str, Any]]:
    return [_trace(f"{tag}-{i}") for i in range(n)]


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


Body = Callable[[str], Any]
#: (name, body as a function of the tag (text is sent as it is), headers, stored in front?)
CASES: list[tuple[str, Body, dict[str, str], bool]] = [
    ("batch, compact", lambda t: _batch(*_good(t)), {**auth(CALLER), **MINIMAL}, True),
    ("batch, full", lambda t: _batch(*_good(t)), auth(CALLER), True),
    ("bare list, compact", lambda t: _good(t), {**auth(CALLER), **MINIMAL}, True),
    ("bare list, full", lambda t: _good(t), auth(CALLER), True),
    ("one-trace batch", lambda t: _batch(_trace(t)), auth(CALLER), True),
    ("one trace, compact", _trace, {**auth(CALLER), **MINIMAL}, True),
    ("one trace, compact, not bound", lambda t: _trace(t, config="cfg_z"),
     {**auth(CALLER), **MINIMAL}, False),
    ("OTLP JSON, compact", lambda t: {"resourceSpans": [{"scopeSpans": [{"spans": []}]}]},
     {**auth(CALLER), **MINIMAL}, False),
    ("Prefer among others", lambda t: _batch(*_good(t)),
     {**auth(CALLER), "Prefer": "respond-async, return=minimal; x=1"}, True),
    ("Prefer representation", lambda t: _batch(*_good(t)),
     {**auth(CALLER), "Prefer": "return=representation"}, True),
    ("request id", lambda t: _batch(*_good(t)), {**auth(CALLER), "X-Request-Id": "req-9"}, True),
    ("operator, time given", lambda t: _batch(_trace(t, time=1_700_000_000.0), _trace(t + "b")),
     auth(OPERATOR), True),
    ("with a retry", lambda t: _batch(_trace("retried"), *_good(t)), auth(CALLER), True),
    ("a retry only, compact", lambda t: _batch(_trace("retried")),
     {**auth(CALLER), **MINIMAL}, True),
    ("run id twice", lambda t: _batch(_trace(t), _trace(t)), auth(CALLER), True),
    ("candidate and current", lambda t: _batch(
        _trace(t), _trace(t + "c", config="cfg_b", arm="candidate")), auth(CALLER), True),
    ("config not bound among good", lambda t: _batch(*_good(t), _trace(t + "z", config="cfg_z")),
     auth(CALLER), True),
    ("config not bound, compact", lambda t: _batch(*_good(t), _trace(t + "z", config="cfg_z")),
     {**auth(CALLER), **MINIMAL}, True),
    ("unknown role among good", lambda t: _batch(*_good(t), _trace(t + "u", role="nosuchrole")),
     auth(CALLER), True),
    ("line break in a tool", lambda t: _batch(*_good(t), _trace(t + "n", tools=["a\nb"])),
     auth(CALLER), False),
    ("every trace refused", lambda t: _batch(_trace(t, config="cfg_z"), _trace(t + "u",
                                                                            role="nosuchrole")),
     auth(CALLER), False),
    ("one trace, refused", lambda t: [_trace(t, config="cfg_z")], auth(CALLER), False),
    ("role the token may not report for", lambda t: _batch(*_good(t)), auth(SCOPED), False),
    ("an invalid trace among good", lambda t: _batch(*_good(t), _trace(t + "i", tokens=-1)),
     auth(CALLER), False),
    ("not a batch shape", lambda t: {"traces": _good(t), "more": 1}, auth(CALLER), False),
    ("empty batch", lambda t: _batch(), auth(CALLER), False),
    ("malformed JSON", lambda t: '{"traces": [' + json.dumps(_trace(t)), auth(CALLER), False),
    ("nests too deep", lambda t: _batch(_trace(t, input=_nested(80))), auth(CALLER), False),
    ("no token", lambda t: _batch(*_good(t)), {}, False),
    ("unknown token", lambda t: _batch(*_good(t)), auth("nobody"), False),
    ("reviewer scope", lambda t: _batch(*_good(t)), auth("reviewer-secret"), False),
    ("browser origin", lambda t: _batch(*_good(t)),
     {**auth(CALLER), "Origin": "http://evil.example"}, False),
    ("foreign host", lambda t: _batch(*_good(t)), {**auth(CALLER), "Host": "attacker.example"},
     False),
]


def _app(redis_url: str, **settings: Any) -> Flask:
    return create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                       "tokens": f"{TOKENS},scoped={SCOPED}:caller:other", **settings})


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    built = _app(redis_url)
    yield built
    built.extensions["rolegate"].cache.stop()
    built.extensions["rolegate"].redis.close()


def _layers(app: Flask) -> tuple[ResolveFastPath, IngestFastPath, CountingInner]:
    outer = app.wsgi_app
    assert isinstance(outer, ResolveFastPath) and isinstance(outer.inner, IngestFastPath)
    fast = outer.inner
    counting = CountingInner(fast.inner)
    fast.inner = counting
    return outer, fast, counting


def _counters() -> list[float]:
    return [metrics.TRACES.labels("summarizer", arm)._value.get()
            for arm in ("current", "candidate")] + [
        metrics.REQUESTS.labels(c)._value.get() for c in ("2xx", "4xx", "5xx")] + [
        metrics.ROLLBACKS.labels("summarizer", "tripwire")._value.get()]


def _post(client: FlaskClient, body: Any, headers: dict[str, str], lines: io.StringIO,
          tag: str) -> dict[str, Any]:
    """Status, body text, headers and log lines of one POST, with the tag made "VIA"."""
    logs.flush()
    lines.truncate(0)
    lines.seek(0)
    data = body if isinstance(body, str) else json.dumps(body)
    r = client.post("/v1/traces", data=data,
                    headers={"Content-Type": "application/json", **headers})
    logs.flush()
    volatile = {"ts", "duration_ms"}
    logged = [{k: v for k, v in json.loads(x).items() if k not in volatile}
              for x in lines.getvalue().splitlines() if x.strip()]
    request_id = r.headers.get("X-Request-Id")
    assert r.headers.get("Content-Length") == str(len(r.get_data()))
    answer = {"status": r.status_code, "body": r.get_data(as_text=True),
              "headers": [(h.lower(), v) for h, v in r.headers
                          if h.lower() not in ("x-request-id", "retry-after")],
              "retry_after": "Retry-After" in r.headers, "logged": logged}
    text = json.dumps(answer).replace(TAGS["fast"], "VIA").replace(TAGS["flask"], "VIA")
    if request_id and request_id != headers.get("X-Request-Id"):
        assert len(request_id) == 32
        text = text.replace(request_id, "drawn")
    return {**json.loads(text), "request_id": request_id if request_id == "req-9" else "drawn"}


def _stored(store: TraceStore, body: Any, tag: str) -> list[Any]:
    if isinstance(body, str):
        return []
    traces = body if isinstance(body, list) else body.get("traces") or []
    found = []
    for trace in traces:
        try:
            kept = store.lookup("summarizer", trace["run_id"])
        except RolegateError:
            found.append(None)  # not stored
            continue
        found.append(kept.trace.model_dump(exclude={"run_id", "key", "time"}))
    return found


def test_batches_are_answered_in_front_of_flask_as_by_the_view(
        app: Flask, lines: io.StringIO, redis_conn: redis.Redis) -> None:
    """Status, body, headers, log lines, counters and what is stored match the Flask view."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    outer, fast, counting = _layers(app)
    store = TraceStore(redis_conn)
    assert client.post("/v1/traces", json=_trace("retried"),
                       headers=auth(CALLER)).json["accepted"] == 1
    for index, (name, make, headers, in_front) in enumerate(CASES):
        seen = []
        for via in ("fast", "flask"):
            tag = f"c{index}-{TAGS[via]}"
            body = make(tag)
            outer.inner = fast if via == "fast" else counting  # behind us, or Flask alone
            before, calls = _counters(), counting.calls
            answer = _post(client, body, headers, lines, tag)
            if via == "fast":
                assert counting.calls - calls == (0 if in_front else 1), name
            counted = [b - a for a, b in zip(before, _counters())]
            stored = json.loads(json.dumps(_stored(store, body, tag)).replace(TAGS[via], "VIA"))
            seen.append((answer, counted, stored))
        outer.inner = fast
        assert seen[0][0] == seen[1][0], name
        assert seen[0][1] == seen[1][1], name
        assert seen[0][2] == seen[1][2], name
        assert not in_front or seen[0][0]["status"] in (200, 207), name


def test_a_batch_that_trips_the_wire_is_answered_as_by_the_view(
        app: Flask, lines: io.StringIO) -> None:
    """A breaching candidate trace in a batch rolls the role back, on either path alike."""
    client = app.test_client()
    outer, fast, counting = _layers(app)
    seen = []
    for via in ("fast", "flask"):
        held = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR))
        match = {"If-Match": held.headers["ETag"]} if held.status_code == 200 else {}
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers={**auth(OPERATOR), **match}).status_code in (200, 201)
        tag = TAGS[via]
        body = _batch(_trace(tag), _trace(tag + "-b", config="cfg_b", arm="candidate",
                                          tools=["web_write"]))
        outer.inner = fast if via == "fast" else counting
        before, calls = _counters(), counting.calls
        answer = _post(client, body, {**auth(CALLER), **MINIMAL}, lines, tag)
        if via == "fast":
            assert counting.calls == calls  # stored and tripped in front of Flask
        assert answer["status"] == 200 and json.loads(answer["body"])["tripwire"], answer
        stage = client.get("/v1/bindings/summarizer",
                           headers=auth(OPERATOR)).json["binding"]["stage"]
        seen.append((answer, [b - a for a, b in zip(before, _counters())], stage))
    # The binding's version moved on with the second PUT: the rollback's version with it.
    versions = re.compile(r'(version\\?": ?)\d+')
    first, second = (versions.sub(r"\1V", json.dumps(one)) for one in seen)
    assert "V," in first and first == second
    assert seen[0][2] != "canary"


def test_a_batch_over_the_quota_is_a_429_counted_once(redis_url: str, lines: io.StringIO,
                                                     redis_conn: redis.Redis) -> None:
    """Three traces against a quota of two a second: the view's 429, Retry-After, used 3."""
    app = _app(redis_url, ingest_quota="traces=2")
    try:
        client = app.test_client()
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        outer, fast, counting = _layers(app)
        seen = []
        for via in ("fast", "flask"):
            redis_conn.delete(*redis_conn.keys("rolegate:quota:*") or ["none"])
            outer.inner = fast if via == "fast" else counting
            calls = counting.calls
            body = _batch(*_good(TAGS[via]))
            answer = _post(client, body, {**auth(CALLER), **MINIMAL}, lines, TAGS[via])
            assert counting.calls == calls + 1  # the view answers the 429
            assert answer["status"] == 429 and answer["retry_after"], answer
            assert json.loads(answer["body"])["error"]["details"]["used"] == 3  # counted once
            assert redis_conn.exists(f"rolegate:{{summarizer}}:claims:{TAGS[via]}-0") == 0
            seen.append(answer)
        assert seen[0] == seen[1]
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_a_redis_failure_on_the_fast_path_is_retried_by_the_view(
        app: Flask, redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's answer never came: the view stores again (idempotent), counting once."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    _, _, counting = _layers(app)
    store = app.extensions["rolegate.traces"]
    real = store.add
    failed: list[int] = []

    def add_once_unanswered(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(1)
            real(*args, **kwargs)  # sent and applied; its answer is lost
            raise OutcomeUnknown("no answer")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "add", add_once_unanswered)
    r = client.post("/v1/traces", json=_batch(*_good("lost")),
                    headers={**auth(CALLER), **MINIMAL})
    assert failed and counting.calls == 1  # handed on after the failure
    assert r.status_code == 200, r.get_data(as_text=True)
    assert (r.json["accepted"], r.json["duplicates"]) == (0, 3)  # stored by the first send
    counters = redis_conn.keys("rolegate:quota:{caller-*}:traces:*")
    assert sum(int(redis_conn.get(k)) for k in counters) == 3  # counted once, not per attempt


@pytest.mark.parametrize("content_type", ["application/x-protobuf", "application/json"])
def test_a_trace_post_is_authenticated_once(app: Flask, monkeypatch: pytest.MonkeyPatch,
                                            content_type: str) -> None:
    """OTLP protobuf goes to Flask unauthenticated here; a batch is stored here: one check each."""
    client = app.test_client()
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    calls: list[str] = []
    real = access.identify

    def counting(*args: Any) -> Any:
        calls.append("identify")
        return real(*args)

    monkeypatch.setattr(access, "identify", counting)
    data = (json.dumps(_batch(*_good("once"))) if content_type == "application/json"
            else b"\x0a\x00")  # one empty ResourceSpans
    r = client.post("/v1/traces", data=data,
                    headers={**auth(CALLER), "Content-Type": content_type})
    assert r.status_code == 200, r.get_data(as_text=True)
    assert calls == ["identify"]
