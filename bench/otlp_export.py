"""Ingest latency with the OTLP exporter running, against the same router without it.

    .venv/bin/python -m bench.otlp_export [--seconds 4] [--clients 2] [--rounds 2]

Starts two redis-servers and two gunicorn routers (deploy/gunicorn.conf.py, 2
workers each) on free loopback ports: A without ROLEGATE_EXPORT_OTLP_ENDPOINT
(the baseline), B with it, pointed at a loopback collector in this process
(tests/otlp_collector.py, decoding every request). Single-trace POST /v1/traces
from `--clients` client processes on keep-alive connections, A and B
alternated `--rounds` times (the machine is shared: alternation spreads drift
over both), in two collector states:

1. hung: the collector never answers (each export waits out its timeout and
   is retried): what ingest pays for a collector that is down;
2. taking: the collector answers every export, so B's exporter encodes and
   sends every run ingested while it is measured: what exporting costs.

Prints requests/s and p50/p99 latency of each, and B/A ratios.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_resolve import free_port, redis_server, wait_until
from gatekeeper.store.export_cursor import ExportCursors
from tests.otlp_collector import collector

OPERATOR = "bench-operator"
CALLER = "bench-caller"
HEADERS = {"Authorization": f"Bearer {CALLER}", "Content-Type": "application/json"}
TRACE = json.dumps({
    "run_id": "RUNID", "role": "summarizer", "config": "cfg_a", "arm": "current",
    "key": "job-RUNID", "tools": ["read_file", "search", "summarize"], "cost_usd": 0.0123,
    "tokens": 1840, "latency_s": 4.2, "output_text": "| a | b |\n|---|---|\n| 1 | 2 |\n",
    "stamps": {"agent_version": "2026.07.06", "instruction_hash": "sha256:9f2c",
               "model_id": "model-x", "tool_schema_hash": "sha256:11ab"}})


@contextmanager
def router(redis_url: str, **env: str) -> Iterator[tuple[int, int]]:
    """A gunicorn router on `redis_url` with the summarizer role; yields its port and pid."""
    port = free_port()
    data = Path(os.environ.get("TMPDIR", "/tmp")) / f"rolegate-bench-otlp-{port}"
    full = dict(os.environ, REDIS_URL=redis_url, ROLEGATE_BIND=f"127.0.0.1:{port}",
                ROLEGATE_WORKERS="2", ROLEGATE_LOG_LEVEL="warning", ROLEGATE_DATA_DIR=str(data),
                ROLEGATE_TOKENS=f"{OPERATOR}:operator,{CALLER}:caller", **env)
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py"),
         "--chdir", str(ROOT), "router:create_app()"],
        env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url), "gunicorn")
        r = requests.put(f"{url}/v1/bindings/summarizer",
                         headers={"Authorization": f"Bearer {OPERATOR}"},
                         json={"current": "cfg_a"}, timeout=5)
        assert r.status_code == 201, r.text
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(20)


def exporter_cpu_s(master: int) -> float:
    """CPU seconds used so far by the `rolegate export-otlp` child of gunicorn master `master`."""
    with open(f"/proc/{master}/task/{master}/children") as listing:
        children = listing.read().split()
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"export-otlp" not in cmdline.read():
                    continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise SystemExit("no export-otlp process under the router's master")


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


def _client(args: tuple[int, int, float, float]) -> list[float]:
    """One client process: single-trace POSTs until the deadline; each one's latency (s)."""
    worker, port, start_at, seconds = args
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies: list[float] = []
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.time() < deadline:
        body = TRACE.replace("RUNID", f"{port}-{worker}-{start_at}-{len(latencies)}")
        began = time.perf_counter()
        connection.request("POST", "/v1/traces", body=body, headers=HEADERS)
        response = connection.getresponse()
        response.read()
        latencies.append(time.perf_counter() - began)
        if response.status != 200:
            raise SystemExit(f"ingest answered {response.status}")
    connection.close()
    return latencies


def phase(pool: Any, port: int, clients: int, seconds: float) -> list[float]:
    """Every request's latency over `seconds` with `clients` clients."""
    start_at = time.time() + 0.3
    results = pool.map(_client, [(w, port, start_at, seconds) for w in range(clients)])
    return [latency for each in results for latency in each]


def summary(latencies: list[float], seconds: float) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms)."""
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return len(ordered) / seconds, statistics.median(ordered) * 1e3, p99 * 1e3


def main() -> None:
    """Run both collector states, alternating the routers, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with ExitStack() as stack:
        got = stack.enter_context(collector())
        got.flowing.clear()  # hung until the second state
        plain_redis = stack.enter_context(redis_server())
        export_redis = stack.enter_context(redis_server())
        plain, _ = stack.enter_context(router(plain_redis))
        exporting, master = stack.enter_context(router(export_redis,
                                                       ROLEGATE_EXPORT_OTLP_ENDPOINT=got.url))
        pool = stack.enter_context(multiprocessing.Pool(args.clients))
        phase(pool, plain, args.clients, 1.0)  # warm both
        phase(pool, exporting, args.clients, 1.0)
        wait_until(lambda: got.requests >= 1, "the exporter's first (hung) request")
        for state in ("hung", "taking"):
            if state == "taking":
                got.flowing.set()
                wait_until(lambda: _caught_up(export_redis), "the exporter to catch up", 120)
            cpu_before, spans_before = exporter_cpu_s(master), got.count()
            runs: dict[str, list[float]] = {"A": [], "B": []}
            for _ in range(args.rounds):
                runs["A"] += phase(pool, plain, args.clients, args.seconds)
                runs["B"] += phase(pool, exporting, args.clients, args.seconds)
            span = args.seconds * args.rounds
            a, b = summary(runs["A"], span), summary(runs["B"], span)
            print(f"collector {state}:")
            print(f"  A no export:  {a[0]:7.0f} req/s  p50 {a[1]:6.2f} ms  p99 {a[2]:6.2f} ms")
            print(f"  B exporting:  {b[0]:7.0f} req/s  p50 {b[1]:6.2f} ms  p99 {b[2]:6.2f} ms")
            print(f"  B/A: rate {b[0] / a[0]:.2f}  p50 {b[1] / a[1]:.2f}  p99 {b[2] / a[2]:.2f}")
            if state == "taking":
                wait_until(lambda: _caught_up(export_redis), "the exporter to catch up", 120)
                spans = got.count() - spans_before
                cpu = exporter_cpu_s(master) - cpu_before
                print(f"  exporter: {spans} spans, {cpu:.2f} CPU s, "
                      f"{cpu / max(spans, 1) * 1e6:.0f} us of CPU per span")


def _caught_up(redis_url: str) -> bool:
    """Whether every run stored in `redis_url` was exported (the exporter's own lag says)."""
    with redis.Redis.from_url(redis_url) as connection:
        state = ExportCursors(connection).role_state("summarizer")
    return sum(stream.lag for stream in state.streams) == 0


if __name__ == "__main__":
    main()
