"""Never starved: requests that wait (long-polls, traces on a hung Redis) leave resolves alone.

These run the shipped gunicorn configuration with ONE worker, so that the old
gthread default (4 threads) would be starved by a handful of waiting requests.
The bounds below are generous (seconds, on a loaded machine) and are about
starvation, not speed: a starved resolve waits for a watch's 20 s timeout.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import requests

from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import OwnRedis, base_env, gunicorn, wait_for

pytestmark = pytest.mark.slow

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}
WATCHES = 40  # ten times what a single gthread worker could hold
#: Each resolve must answer within this, far less than a watch's 20 s wait.
RESOLVE_BOUND_S = 5.0


@contextmanager
def _router() -> Iterator[tuple[str, OwnRedis]]:
    own = OwnRedis()
    own.start()
    try:
        env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_REFRESH_INTERVAL="0.05")
        with gunicorn(env, workers=1) as url:
            r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY,
                             headers=auth(OPERATOR), timeout=10)
            assert r.status_code == 201, r.text
            yield url, own
    finally:
        own.close()


def _resolves_answer(url: str, count: int = 20) -> list[int]:
    statuses = []
    for i in range(count):
        r = requests.get(f"{url}/v1/resolve/summarizer?key=job-{i}", headers=auth(CALLER),
                         timeout=RESOLVE_BOUND_S)
        statuses.append(r.status_code)
    return statuses


def _in_background(pool: ThreadPoolExecutor, count: int,
                   call: Callable[[], requests.Response]) -> list[Future[requests.Response]]:
    return [pool.submit(call) for _ in range(count)]


def test_open_watches_do_not_starve_resolves_and_all_wake_on_a_change() -> None:
    """40 long-polls held on one worker: resolves still answer; a change answers every watch."""
    with _router() as (url, _own), ThreadPoolExecutor(WATCHES) as pool:
        generation = requests.get(f"{url}/v1/bindings", headers=auth(CALLER),
                                  timeout=10).headers["ETag"].strip('"g')
        started = threading.Semaphore(0)

        def watch() -> requests.Response:
            started.release()
            return requests.get(f"{url}/v1/bindings/watch?generation={generation}&timeout=20",
                                headers=auth(CALLER), timeout=40)

        watches = _in_background(pool, WATCHES, watch)
        for _ in range(WATCHES):
            started.acquire(timeout=10)
        # They reached the one worker and wait there (its /metrics counts them).
        wait_for(lambda: f"rolegate_watches_waiting {WATCHES}.0" in requests.get(
            f"{url}/metrics", timeout=10).text, 30, f"{WATCHES} watches to wait")
        assert not any(w.done() for w in watches), "a watch answered before any change"

        assert _resolves_answer(url) == [200] * 20

        r = requests.post(f"{url}/v1/bindings/summarizer/rollback", json={"reason": "test"},
                          headers=auth(OPERATOR), timeout=10)
        assert r.status_code == 200, r.text
        answers = [w.result(timeout=15) for w in watches]
        assert [a.status_code for a in answers] == [200] * WATCHES
        assert all(a.json()["roles"]["summarizer"]["binding"]["share"] == 0 for a in answers)


def test_traces_waiting_on_a_hung_redis_do_not_starve_resolves() -> None:
    """Redis stopped (SIGSTOP) under trace load: resolves answer; traces fail fast, then recover."""
    with _router() as (url, own), ThreadPoolExecutor(24) as pool:
        trace = {"run_id": "r-0", "role": "summarizer", "config": "cfg_a", "arm": "current",
                 "key": "job-0", "tools": ["read_file"], "answered": True,
                 "stamps": {"agent_version": "1", "instruction_hash": "sha256:9f2c",
                            "model_id": "model-x", "tool_schema_hash": "sha256:11ab"}}
        r = requests.post(f"{url}/v1/traces", json=trace, headers=auth(CALLER), timeout=10)
        assert r.status_code == 200, r.text
        assert own.proc is not None
        pid = own.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            def post(i: list[int] = [0]) -> requests.Response:  # noqa: B006 - a counter
                i[0] += 1
                return requests.post(f"{url}/v1/traces",
                                     json={**trace, "run_id": f"hung-{i[0]}"},
                                     headers=auth(CALLER), timeout=30)

            waiting = _in_background(pool, 24, post)
            time.sleep(0.5)
            assert _resolves_answer(url) == [200] * 20
            answers = [w.result(timeout=30) for w in waiting]
            # Sent and never answered: 504 outcome_unknown (the retry is safe); refused by the
            # open breaker before sending: 503 store_unavailable. Never a 200, never a 500.
            codes = {503: "store_unavailable", 504: "outcome_unknown"}
            assert {a.status_code for a in answers} <= set(codes), [a.status_code for a in answers]
            assert all(a.json()["error"]["code"] == codes[a.status_code] for a in answers), \
                answers[0].text
            # Once the breaker is open, a trace is refused at once instead of waiting.
            began = time.monotonic()
            assert post().status_code == 503
            assert time.monotonic() - began < 1.5
        finally:
            os.kill(pid, signal.SIGCONT)

        def stored_again() -> bool | None:
            r = requests.post(f"{url}/v1/traces", json={**trace, "run_id": "after"},
                              headers=auth(CALLER), timeout=10)
            return r.status_code == 200 or None

        wait_for(stored_again, 20, "traces stored again after Redis resumed")
