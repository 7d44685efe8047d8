"""What the JSON logs and Prometheus counters cost a resolve, measured in-process.

    python -m bench.observability [--requests 5000] [--rounds 3]

Starts a private embedded valkey-server seeded with bindings.example.json (as
bench.resolve does), builds the router four times on it: without the logs and metrics
hooks (the baseline), with metrics only, with both (what ships), and with both
but ROLEGATE_LOG_RESOLVES=0, then calls each app's WSGI entry directly with a prebuilt resolve request (no sockets, so
the figures are the hooks' cost, not loopback noise) and alternates them
for `--rounds` rounds so drift on a shared machine hits all alike. Log lines go
to /dev/null through the real handler, so the write itself is counted. Also
runs the same with multiprocess metrics (PROMETHEUS_MULTIPROC_DIR) in a
subprocess, since that is what gunicorn uses.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROLE = "summarizer"  # from bindings.example.json, which the private server is seeded with
TOKEN = "bench-token"
#: name -> (blueprint modules left out, settings overrides)
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "baseline (no logs, no metrics)": (("router.logs", "router.metrics"), {}),
    "metrics only": (("router.logs",), {}),
    "logs + metrics (shipped)": ((), {}),
    "same, ROLEGATE_LOG_RESOLVES=0": ((), {"log_resolves": False}),
}


def build(url: str, without: tuple[str, ...], overrides: dict[str, Any] | None = None) -> Any:
    """The router with the modules in `without` left out of its blueprints."""
    import router.app as app_module

    kept = tuple(m for m in app_module.BLUEPRINT_MODULES if m not in without)
    saved = app_module.BLUEPRINT_MODULES
    setattr(app_module, "BLUEPRINT_MODULES", kept)  # noqa: B010 - a bench-only swap
    try:
        app = app_module.create_app({"redis_url": url, "tokens": f"{TOKEN}:caller",
                                     **(overrides or {})})
    finally:
        setattr(app_module, "BLUEPRINT_MODULES", saved)  # noqa: B010
    return app


def caller(app: Any) -> Callable[[int], None]:
    """A function making one resolve request (job key varies) through the WSGI app."""
    wsgi = app.wsgi_app

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        if not status.startswith("200"):
            raise SystemExit(f"resolve answered {status}")

    def call(i: int) -> None:
        environ = {
            "REQUEST_METHOD": "GET", "PATH_INFO": f"/v1/resolve/{ROLE}",
            "QUERY_STRING": f"key=job-{i % 1000}", "SERVER_NAME": "bench", "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr,
            "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
            "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
        }
        for chunk in wsgi(environ, start_response):
            pass

    return call


def measure(url: str, requests: int, rounds: int) -> dict[str, float]:
    """Microseconds per resolve for each variant, best of `rounds` alternations."""
    events = logging.getLogger("rolegate.events")
    sink = open(os.devnull, "w")  # noqa: SIM115 - closed below
    handler = logging.StreamHandler(sink)
    events.handlers[:] = [handler]
    events.propagate = False
    events.setLevel(logging.INFO)
    apps = {name: build(url, without, overrides)
            for name, (without, overrides) in VARIANTS.items()}
    calls = {name: caller(app) for name, app in apps.items()}
    for call in calls.values():  # warm: load the binding copy, fill caches
        for i in range(500):
            call(i)
    best = {name: float("inf") for name in calls}
    try:
        for _ in range(rounds):
            for name, call in calls.items():
                started = time.perf_counter()
                for i in range(requests):
                    call(i)
                best[name] = min(best[name], (time.perf_counter() - started) / requests * 1e6)
    finally:
        for app in apps.values():
            app.extensions["rolegate"].cache.stop()
        events.handlers[:] = []
        sink.close()
    return best


def report(title: str, best: dict[str, float]) -> None:
    """Print µs/request and the ratio to the baseline."""
    base = best["baseline (no logs, no metrics)"]
    print(title)
    print(f"  {'variant':36} {'us/resolve':>10} {'req/s/core':>11} {'vs baseline':>12}")
    for name, micros in best.items():
        print(f"  {name:36} {micros:10.1f} {1e6 / micros:11.0f} {base / micros:11.2f}x")


def main(argv: list[str] | None = None) -> int:
    """Run the comparison, in this process and under multiprocess metrics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json:  # the multiprocess child: print figures as JSON
        print(json.dumps(measure(args.redis, args.requests, args.rounds)))
        return 0
    from bench.resolve import private_redis

    with private_redis() as (url, _data_dir):
        report(f"in-process WSGI, {args.requests} resolves x best of {args.rounds} rounds "
               "(single-process metrics)", measure(url, args.requests, args.rounds))
        with tempfile.TemporaryDirectory() as prom:
            env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": prom}
            out = subprocess.run(
                [sys.executable, "-m", "bench.observability", "--json", "--redis", url,
                 "--requests", str(args.requests), "--rounds", str(args.rounds)],
                env=env, capture_output=True, text=True, check=True)
            report("same, multiprocess metrics (as under gunicorn)",
                   json.loads(out.stdout.strip().splitlines()[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
