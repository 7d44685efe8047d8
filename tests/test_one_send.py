"""One send per answer: gunicorn's own request parsing and Response, with and without OneSendResponse.

A real request goes over a real socket pair, gunicorn's parser reads it and
`gunicorn.http.wsgi.create` builds the response and environ as its workers
do; the router (its fast paths and Flask) answers; the socket's sends are
counted on the way out and the client side reads the answer back with
http.client. Installed, a resolve, an OFREP evaluation and a Flask answer
leave in one send; gunicorn's own Response takes two.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from gunicorn import http as gunicorn_http
from gunicorn.config import Config
from gunicorn.http import wsgi

from router.server import one_send
from tests.conftest import CALLER, OPERATOR, auth

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}
OFREP = json.dumps({"context": {"targetingKey": "job-7"}})


class CountingSocket:
    """A real socket whose sendall calls are counted (gunicorn writes with sendall only)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sends: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        """Count, then send for real."""
        self.sends.append(bytes(data))
        self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.fixture
def gunicorn_response() -> Iterator[None]:
    """Leave gunicorn's Response class as each test found it."""
    original = wsgi.Response
    yield
    wsgi.Response = original


def _serve_one(app: Flask, raw: bytes) -> tuple[int, http.client.HTTPResponse]:
    """Serve one request as a gunicorn sync worker does; (sends, the answer as a client reads it)."""
    server_side, client_side = socket.socketpair()
    try:
        client_side.sendall(raw)
        cfg = Config()
        parser = gunicorn_http.get_parser(cfg, server_side, ("127.0.0.1", 5000))
        req = next(parser)
        counting = CountingSocket(server_side)
        resp, environ = wsgi.create(req, counting, ("127.0.0.1", 5000), ("127.0.0.1", 8080),
                                    cfg)
        for chunk in app.wsgi_app(environ, resp.start_response):
            resp.write(chunk)
        resp.close()
        server_side.shutdown(socket.SHUT_WR)
        answer = http.client.HTTPResponse(client_side)
        answer.begin()
        answer.body = answer.read()  # type: ignore[attr-defined]
        return len(counting.sends), answer
    finally:
        server_side.close()
        client_side.close()


def _request(method: str, path: str, body: str = "") -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
            f"Authorization: Bearer {CALLER}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body.encode()


REQUESTS = [
    ("GET", "/v1/resolve/summarizer?key=job-7", ""),          # the resolve fast path
    ("POST", "/ofrep/v1/evaluate/flags/summarizer", OFREP),   # the OFREP fast path
    ("POST", "/ofrep/v1/evaluate/flags", OFREP),              # bulk, fast
    ("GET", "/v1/bindings/summarizer", ""),                   # Flask
    ("GET", "/v1/resolve/nobody?key=k", ""),                  # a Flask refusal (404)
]


@pytest.mark.parametrize("method, path, body", REQUESTS)
def test_installed_every_answer_leaves_in_one_send(
        app: Flask, client: FlaskClient, gunicorn_response: None, method: str, path: str,
        body: str) -> None:
    """With OneSendResponse, headers and body go in one sendall; without, gunicorn sends two."""
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers=auth(OPERATOR)).status_code == 201
    answers = {}
    for installed in (False, True):
        wsgi.Response = one_send.OneSendResponse if installed else one_send._Base
        sends, answer = _serve_one(app, _request(method, path, body))
        answers[installed] = (answer.status, json.loads(answer.body))  # type: ignore[attr-defined]
        assert sends == (1 if installed else 2), (installed, path)
        assert answer.getheader("Content-Length") == str(len(answer.body))  # type: ignore[attr-defined]
    assert answers[True][0] == answers[False][0]
    if answers[True][0] == 200 and "resolve" in path:
        assert answers[True][1]["arm"] in ("current", "candidate")


def test_a_streamed_or_empty_answer_keeps_gunicorns_path(
        app: Flask, gunicorn_response: None) -> None:
    """A body in two pieces or none at all (HEAD) is written by gunicorn's own code."""
    wsgi.Response = one_send.OneSendResponse

    def streamed(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "10")])
        return [b"hello", b"world"]

    app.wsgi_app = streamed  # type: ignore[method-assign]
    sends, answer = _serve_one(app, _request("GET", "/anything"))
    assert sends == 3 and answer.body == b"helloworld"  # type: ignore[attr-defined]


def test_install_honours_the_switch(gunicorn_response: None) -> None:
    """ROLEGATE_ONE_SEND=0 leaves gunicorn's Response; otherwise OneSendResponse is built."""
    wsgi.Response = one_send._Base
    assert one_send.install({one_send.ENV: "0"}) is False and wsgi.Response is one_send._Base
    assert one_send.supported() is True
    assert one_send.install({}) is True and wsgi.Response is one_send.OneSendResponse


@pytest.mark.parametrize("version, status, close, chunked", [
    ((1, 1), "200 OK", False, False), ((1, 1), "404 NOT FOUND", True, False),
    ((1, 0), "200 OK", False, True)])
def test_the_default_headers_are_gunicorns(version: tuple[int, int], status: str,
                                            close: bool, chunked: bool) -> None:
    """The status line and default headers are gunicorn's own, the Date formatted once a second."""

    class Req:
        def __init__(self) -> None:
            self.version = version
            self.method = "GET"

        def should_close(self) -> bool:
            return close

    def lines(cls: Any) -> list[str]:
        resp = cls(Req(), None, Config())
        resp.status, resp.status_code, resp.chunked = status, int(status[:3]), chunked
        out: list[str] = resp.default_headers()
        return out

    for _ in range(3):  # the second may turn between the two calls: try again
        ours, theirs = lines(one_send.OneSendResponse), lines(one_send._Base)
        if ours == theirs:
            break
    assert ours == theirs
    assert ours[0] == f"HTTP/{version[0]}.{version[1]} {status}\r\n"


def test_a_gunicorn_with_other_default_headers_keeps_them(
        gunicorn_response: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gunicorn whose default headers differ from the lines OneSendResponse writes (a new
    release adding one) keeps its own: one send stays, the copied lines are not used."""
    theirs = one_send._Base.default_headers

    def changed(self: Any) -> list[str]:
        return [*theirs(self), "X-Gunicorn-New: 1\r\n"]

    monkeypatch.setattr(one_send._Base, "default_headers", changed)
    wsgi.Response = one_send._Base
    assert one_send.install({}) is True
    assert issubclass(wsgi.Response, one_send.OneSendResponse)

    class Req:
        version, method = (1, 1), "GET"

        def should_close(self) -> bool:
            return False

    resp = wsgi.Response(Req(), None, Config())
    resp.status, resp.status_code = "200 OK", 200
    assert "X-Gunicorn-New: 1\r\n" in resp.default_headers()
