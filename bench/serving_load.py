"""The load pieces of `bench.serving`: the trace it posts, open watches, trace load, a hung process.

Kept apart from the benchmark's parts and its main (`bench.serving`); `bench.heavy_requests`
posts the same trace.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from bench.resolve import TOKEN

OPERATOR = "bench-operator-token"
INGEST_ROLE = "ingestbench"
OUTPUT = ("Summary of the quarter.\n\n| region | revenue | growth |\n|---|---:|---:|\n"
          "| north | 1200 | 4% |\n| south | 900 | -1% |\n")
#: How long each watch waits for a change before it is answered 304 and asked again.
WATCH_TIMEOUT_S = 5.0
TRACE_HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def trace(run_id: str, i: int = 0) -> dict[str, Any]:
    """One realistic current-arm trace of the ingest bench's role."""
    return {"run_id": run_id, "role": INGEST_ROLE, "config": "cfg_a", "arm": "current",
            "key": f"job-{run_id}", "tools": ["read_file", "search", "summarize"][: 2 + i % 2],
            "tool_errors": 0, "answered": True, "cost_usd": 0.0123, "tokens": 1840,
            "latency_s": 4.2, "artifacts": ["output/result.md"], "output_text": OUTPUT,
            "stamps": {"agent_version": "2026.07.06", "instruction_hash": "sha256:9f2c",
                       "model_id": "model-x", "tool_schema_hash": "sha256:11ab"}}


SINGLE = json.dumps(trace("RUNID"))


def _request(port: int, method: str, path: str, body: Any = None,
             token: str = OPERATOR, timeout: float = 60) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        payload = json.dumps(body) if body is not None else None
        conn.request(method, path, body=payload,
                     headers={"Authorization": f"Bearer {token}",
                              "Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        conn.close()


# -- 2. watches ---------------------------------------------------------------------


class Watchers:
    """`count` clients each holding a GET /v1/bindings/watch open, re-asking when answered."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.stop = threading.Event()
        self.answered = 0
        self.failed = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                status, body = _request(self.port, "GET", "/v1/bindings", token=TOKEN)
                generation = body["generation"] if status == 200 else 0
                while not self.stop.is_set():
                    status, _ = _request(self.port, "GET", f"/v1/bindings/watch?generation="
                                         f"{generation}&timeout={WATCH_TIMEOUT_S:g}",
                                         token=TOKEN, timeout=WATCH_TIMEOUT_S + 20)
                    self.answered += 1
            except (OSError, ValueError, KeyError, TypeError):
                self.failed += 1
                self.stop.wait(0.5)

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        time.sleep(2.0)  # let them connect and settle
        return self

    def __exit__(self, *exc: object) -> None:
        # Let every watch in flight end (it holds a server thread until it does),
        # so the next measurement starts on an idle router.
        self.stop.set()
        for t in self.threads:
            t.join(WATCH_TIMEOUT_S + 25)


def open_connections(port: int) -> int:
    """Established loopback connections to `port` (the watches actually held open)."""
    target = f"{port:04X}"
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                for row in list(lines)[1:]:
                    fields = row.split()
                    if fields[1].endswith(":" + target) and fields[3] == "01":
                        count += 1
        except OSError:
            continue
    return count


# -- 3. Redis hung under trace load -------------------------------------------------


class TraceLoad:
    """`clients` threads each POSTing single traces back to back; counts answers by status."""

    def __init__(self, port: int, clients: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.statuses: dict[int, int] = {}
        self.slowest = 0.0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                        for n in range(clients)]

    def _run(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            started = time.perf_counter()
            try:
                status, _ = _request(self.port, "POST", "/v1/traces",
                                     trace(f"load-{n}-{i}-{started}"), token=TOKEN, timeout=30)
            except OSError:
                status = 0
            spent = time.perf_counter() - started
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1
                self.slowest = max(self.slowest, spent)

    def snapshot(self) -> tuple[dict[int, int], float]:
        """Answers by status so far and the slowest, then start counting afresh."""
        with self.lock:
            out = (dict(self.statuses), self.slowest)
            self.statuses.clear()
            self.slowest = 0.0
        return out

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(35)


@contextmanager
def hung(pid: int) -> Iterator[None]:
    """Redis stopped with SIGSTOP for the duration (SIGCONT after, whatever happens)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# -- 5. the longest script of a 10,000-trace batch ----------------------------------
