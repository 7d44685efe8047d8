"""Stop promptly: SIGTERM answers a router's open watches at once and it exits within 5 s."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import (
    GUNICORN_CONFIG,
    OwnRedis,
    base_env,
    free_port,
    private_data_dir,
    process,
    wait_for,
)

#: What the issue asks: a router told to stop is gone within this long.
EXIT_WITHIN_S = 5.0


@pytest.fixture
def own() -> Iterator[OwnRedis]:
    """A private Redis for this router."""
    server = OwnRedis(persist=False)
    server.start()
    yield server
    server.close()


@pytest.mark.parametrize("worker_class", ["gevent", "gthread"])
def test_sigterm_answers_open_watches_and_exits_within_5_s(
        own: OwnRedis, tmp_path: Path, worker_class: str) -> None:
    """Two watches waiting 20 s each: SIGTERM gets both a 304 and the router gone in < 5 s.

    One worker holds both watches, so its /metrics gauge (per worker) says both wait in
    the handler before the signal. With two workers nothing could say so: the test
    signalled once one watch waited, and the other, not yet taken from the listen
    backlog or not yet read, was reset, as any server resets a request it never took.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONFIG),
            "--bind", f"127.0.0.1:{port}", "--workers", "1", "router:create_app()"]
    env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS, ROLEGATE_WORKER_CLASS=worker_class)
    answers: list[tuple[int, float]] = []
    with private_data_dir(env) as private_env, \
            process(argv, private_env, url, output=tmp_path / "router.log") as proc:
        r = requests.put(f"{url}/v1/bindings/summarizer", headers=auth(OPERATOR), timeout=10,
                         json={"current": "cfg_a"})
        assert r.status_code == 201, r.text
        generation = requests.get(f"{url}/v1/bindings", headers=auth(CALLER),
                                  timeout=10).headers["ETag"].strip('"g')

        def watch() -> None:
            r = requests.get(f"{url}/v1/bindings/watch?generation={generation}&timeout=20",
                             headers=auth(CALLER), timeout=30)
            answers.append((r.status_code, time.monotonic()))

        watchers = [threading.Thread(target=watch) for _ in range(2)]
        for each in watchers:
            each.start()
        wait_for(lambda: "rolegate_watches_waiting 2.0" in requests.get(
            f"{url}/metrics", timeout=10).text, 20, "both watches waiting on the router")
        told = time.monotonic()
        proc.terminate()
        proc.wait(EXIT_WITHIN_S + 10)
        exited = time.monotonic() - told
        for each in watchers:
            each.join(10)
    assert exited < EXIT_WITHIN_S, (exited, (tmp_path / "router.log").read_text()[-6000:])
    assert [status for status, _ in answers] == [304, 304]
    assert all(at - told < EXIT_WITHIN_S for _, at in answers)
