"""Resolve against a bare constant-JSON endpoint, same app, same gunicorn config, one run.

    python -m bench.resolve [--duration 2] [--rounds 4] [--worker-classes gthread,sync]

Starts a private embedded valkey-server (the one `rolegate serve` uses), seeds
bindings.example.json, then for each worker class runs gunicorn with
deploy/gunicorn.conf.py serving the real router plus `/bench/bare` (a constant
JSON answer of the same size, no auth, no Redis). A keep-alive load generator
(client processes x threads, on loopback) alternates the two endpoints for
`--rounds` rounds, so drift on this shared machine hits both alike, and prints
req/s, p50, p99 and the workers' CPU time per request for each (steadier than
req/s on a machine shared with other work), and resolve/bare. Resolve is authenticated with a
caller token and uses 1,000 different job keys, as real callers would.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import redis
from flask import Flask

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "gunicorn.conf.py"
TOKEN = "bench-caller-token"
ROLE = "summarizer"
#: The same shape and about the same size as a resolve answer.
BARE_ANSWER = {"role": ROLE, "config": "summarizer@2026-10-02", "arm": "current",
               "stage": "canary", "share": 0.1, "shadow": None, "version": 1,
               "key": "job-000", "stale": False}


def bench_app() -> Flask:
    """The real router with one extra constant endpoint (gunicorn imports this)."""
    from router import create_app

    app = create_app()

    @app.get("/bench/bare")
    def bare() -> dict[str, Any]:
        return BARE_ANSWER

    return app


# -- load generator ----------------------------------------------------------------


def _client_thread(port: int, paths: list[str], headers: dict[str, str], deadline: float,
                   latencies: array[float], errors: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    i = 0
    try:
        while True:
            now = time.perf_counter()
            if now >= deadline:
                return
            conn.request("GET", paths[i % len(paths)], headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - now)
            if response.status != 200:
                errors[0] += 1
            if response.will_close:
                conn.close()  # the next request reconnects (sync workers close each time)
            i += 1
    finally:
        conn.close()


def _client_process(port: int, paths: list[str], headers: dict[str, str], start: float,
                    duration: float, threads: int, out: Connection) -> None:
    while time.time() < start:  # start together with the other client processes
        time.sleep(0.001)
    deadline = time.perf_counter() + duration
    per_thread = [array("d") for _ in range(threads)]
    errors = [0]
    workers = [threading.Thread(target=_client_thread,
                                args=(port, paths, headers, deadline, lat, errors))
               for lat in per_thread]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    merged = array("d")
    for lat in per_thread:
        merged.extend(lat)
    out.send((merged.tobytes(), errors[0]))
    out.close()


def drive(port: int, paths: list[str], headers: dict[str, str], duration: float,
          processes: int, threads: int) -> tuple[array[float], int]:
    """Run the load for `duration` seconds; return every latency and the error count."""
    ctx = multiprocessing.get_context("fork")
    start = time.time() + 0.2
    pipes, procs = [], []
    for _ in range(processes):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client_process,
                           args=(port, paths, headers, start, duration, threads, send))
        proc.start()
        send.close()
        pipes.append(receive)
        procs.append(proc)
    latencies = array("d")
    errors = 0
    for receive, proc in zip(pipes, procs):
        raw, errs = receive.recv()
        receive.close()
        proc.join()
        chunk = array("d")
        chunk.frombytes(raw)
        latencies.extend(chunk)
        errors += errs
    return latencies, errors


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


# -- servers -----------------------------------------------------------------------


@contextmanager
def private_redis() -> Iterator[tuple[str, str]]:
    """A private embedded valkey-server seeded with bindings.example.json.

    Yields its URL and its data directory (the routers' data dir too, so their
    metrics files stay out of the checkout's .rolegate/).
    """
    from bindings.store import BindingStore
    from router.cli.serve import load_binding_file, seed_bindings
    from router.server.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="rolegate-bench-") as data_dir:
        server = EmbeddedRedis(data_dir, appendfsync="no")
        url = server.start()
        try:
            connection = redis.Redis.from_url(url)
            seed_bindings(BindingStore(connection),
                          load_binding_file(ROOT / "bindings.example.json"), "example")
            connection.close()
            yield url, data_dir
        finally:
            server.stop()


@contextmanager
def gunicorn(redis_url: str, data_dir: str, worker_class: str,
             workers: int) -> Iterator[tuple[int, int]]:
    """gunicorn with deploy/gunicorn.conf.py serving bench_app(); yield (port, master pid)."""
    from router.server.embedded import free_port

    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "ROLEGATE_TOKENS": f"bench={TOKEN}:caller",
           "ROLEGATE_WORKER_CLASS": worker_class, "ROLEGATE_DATA_DIR": data_dir}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("ROLEGATE_ACCESS_LOG", None)
    argv = [sys.executable, "-m", "gunicorn", "--config", str(CONFIG),
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "bench.resolve:bench_app()"]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _ready(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"gunicorn ({worker_class}) did not start")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def server_cpu_seconds(master: int) -> float:
    """CPU time (user + system) used so far by the gunicorn master's worker processes.

    On a machine shared with other work, CPU per request is a steadier measure
    of what an endpoint costs than req/s, which moves with everyone's load.
    """
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command name: state, ppid, ..., utime is field 14, stime 15 (1-based).
        if int(fields[1]) == master:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except OSError:
        return False


# -- the run -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of bare/resolve")
    parser.add_argument("--worker-classes", default="gthread,sync")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--threads", type=int, default=4, help="connections per client process")
    args = parser.parse_args(argv)

    endpoints = {
        "bare": ([f"/bench/bare?key=job-{i:03d}" for i in range(1000)], {}),
        "resolve": ([f"/v1/resolve/{ROLE}?key=job-{i:03d}" for i in range(1000)],
                    {"Authorization": f"Bearer {TOKEN}"}),
    }
    print(f"cpus={os.cpu_count()} workers={args.workers} clients={args.processes}x{args.threads} "
          f"keep-alive, {args.rounds} rounds x {args.duration:g}s per endpoint, loopback")
    results: dict[str, dict[str, tuple[float, float, float, int, float]]] = {}
    with private_redis() as (url, data_dir):
        for worker_class in args.worker_classes.split(","):
            with gunicorn(url, data_dir, worker_class, args.workers) as (port, master):
                for paths, headers in endpoints.values():  # warm both up
                    drive(port, paths, headers, 0.5, args.processes, args.threads)
                latencies = {name: array("d") for name in endpoints}
                errors = dict.fromkeys(endpoints, 0)
                cpu = dict.fromkeys(endpoints, 0.0)
                for _ in range(args.rounds):
                    for name, (paths, headers) in endpoints.items():
                        before = server_cpu_seconds(master)
                        measured, failed = drive(port, paths, headers, args.duration,
                                                 args.processes, args.threads)
                        cpu[name] += server_cpu_seconds(master) - before
                        latencies[name].extend(measured)
                        errors[name] += failed
            results[worker_class] = {}
            for name in endpoints:
                ordered = sorted(latencies[name])
                rps = len(ordered) / (args.duration * args.rounds)
                cpu_us = cpu[name] / max(1, len(ordered)) * 1e6
                results[worker_class][name] = (rps, percentile(ordered, 50) * 1e3,
                                               percentile(ordered, 99) * 1e3, errors[name],
                                               cpu_us)

    print(f"{'worker':<8} {'endpoint':<9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'errors':>7} {'server cpu us/req':>18}")
    for worker_class, rows in results.items():
        for name, (rps, p50, p99, failed, cpu_us) in rows.items():
            print(f"{worker_class:<8} {name:<9} {rps:>8.0f} {p50:>8.2f} {p99:>8.2f} "
                  f"{failed:>7} {cpu_us:>18.0f}")
    for worker_class, rows in results.items():
        ratio = rows["resolve"][0] / rows["bare"][0]
        cpu_ratio = rows["bare"][4] / rows["resolve"][4]
        print(f"{worker_class}: resolve/bare req/s = {ratio:.2f}"
              f" ({'meets' if ratio >= 0.9 else 'misses'} the 0.9 target); "
              f"by server CPU per request = {cpu_ratio:.2f}; "
              f"p50 {rows['resolve'][1] / rows['bare'][1]:.2f}x, "
              f"p99 {rows['resolve'][2] / rows['bare'][2]:.2f}x")
    if "gthread" in results and "sync" in results:
        print(f"gthread/sync resolve req/s = "
              f"{results['gthread']['resolve'][0] / results['sync']['resolve'][0]:.2f}; "
              f"by server CPU per request = "
              f"{results['sync']['resolve'][4] / results['gthread']['resolve'][4]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
