"""Helpers for tests that need the router on a real socket: a werkzeug server on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

from router.api.watch import notifier
from tests.conftest import OPERATOR, auth
from tests.deadlines import scale, scaled


class LiveRouter:
    """The app served on a fixed loopback port that a test can stop and start again."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.port = 0
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self.port = server.server_port
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join(5)
        self._server = None

    def api(self, method: str, path: str, token: str = OPERATOR, **kwargs: Any) -> Any:
        """Call the router over HTTP and return the JSON of a 2xx answer."""
        headers = {**auth(token), **kwargs.pop("headers", {})}
        with requests.request(method, f"{self.url}{path}", headers=headers, timeout=5,
                              **kwargs) as response:
            assert response.ok, (response.status_code, response.text)
            return response.json()


@pytest.fixture
def router(app: Flask) -> Iterator[LiveRouter]:
    """A live router on a free loopback port, stopped after the test."""
    live = LiveRouter(app)
    live.start()
    yield live
    live.stop()
    notifier(app).stop()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> float:
    """Poll `predicate` until true; return the seconds it took, fail the test after `timeout`
    seconds scaled to the machine's load (tests.deadlines)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > scaled(timeout):
            pytest.fail(f"condition not met within {timeout}s (load scale {scale():.2f})")
        time.sleep(step)
    return time.monotonic() - started


def put_role(router: LiveRouter, role: str, **binding: Any) -> dict[str, Any]:
    """Create a role with `binding`."""
    result: dict[str, Any] = router.api("PUT", f"/v1/bindings/{role}", json=binding)
    return result


def canary(router: LiveRouter, role: str, share: float) -> None:
    """Put `role`'s candidate on a canary of `share`."""
    router.api("POST", f"/v1/bindings/{role}/canary", json={"share": share, "reason": "test"})


def rollback(router: LiveRouter, role: str) -> None:
    """Roll `role` back to its current config."""
    router.api("POST", f"/v1/bindings/{role}/rollback", json={"reason": "test"})


def refused_url() -> str:
    """A loopback URL whose port refuses connections (nothing listened there a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


#: The fields of a resolve answer that name its run (`rolegate.run_ids`): each resolve
#: mints its own, so two answers for one job differ there and nowhere else.
RUN_FIELDS = ("run_id", "run_stem", "run_seq")


def apart_from_run(answer: Any) -> dict[str, Any]:
    """A resolve answer without the fields that name its run."""
    return {k: v for k, v in dict(answer).items() if k not in RUN_FIELDS}

