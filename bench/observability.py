"""What the JSON logs and Prometheus counters cost a resolve, measured in-process.

    python -m bench.observability [--requests 5000] [--rounds 3]

Starts a private embedded valkey-server seeded with bindings.example.json (as
bench.resolve does), builds the router four times on it: without the logs and metrics
hooks (the baseline), with metrics only, with both (what ships), and with both
but ROLEGATE_LOG_RESOLVES=0, then calls each app's WSGI entry directly with a prebuilt resolve request (no sockets, so
the figures are the hooks' cost, not loopback noise). Each variant runs in a
fresh process, alternating for `--rounds` rounds so drift on a shared machine
hits all alike; the best round counts. Log lines go to /dev/null through the
real handler, so the write itself is counted. Everything runs twice: with
single-process metrics and with PROMETHEUS_MULTIPROC_DIR set, as under gunicorn.
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
    "baseline (no logs, no metrics)": (("router.server.logs", "router.server.metrics"), {}),
    "metrics only": (("router.server.logs",), {}),
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
        for _chunk in wsgi(environ, start_response):
            pass

    return call


def measure(url: str, variant: str, requests: int) -> float:
    """Microseconds per resolve of one variant, in this process (a fresh one per call).

    One app per process: with several apps in one process, the later ones were
    slower for reasons unrelated to them (a profile showed werkzeug's per-match
    `re.compile` missing the `re` module's cache there, 13 us a call instead of 2).
    """
    events = logging.getLogger("rolegate.events")
    sink = open(os.devnull, "w")  # noqa: SIM115 - closed below
    events.handlers[:] = [logging.StreamHandler(sink)]
    events.propagate = False
    events.setLevel(logging.INFO)
    without, overrides = VARIANTS[variant]
    app = build(url, without, overrides)
    call = caller(app)
    try:
        for i in range(500):  # warm: load the binding copy, fill caches
            call(i)
        started = time.perf_counter()
        for i in range(requests):
            call(i)
        return (time.perf_counter() - started) / requests * 1e6
    finally:
        app.extensions["rolegate"].cache.stop()
        events.handlers[:] = []
        sink.close()


def run_child(url: str, variant: str, requests: int, multiprocess: str | None) -> float:
    """Measure `variant` in a fresh interpreter (with PROMETHEUS_MULTIPROC_DIR if given)."""
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    if multiprocess is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = multiprocess
    out = subprocess.run(
        [sys.executable, "-m", "bench.observability", "--child", variant, "--redis", url,
         "--requests", str(requests)],
        env=env, capture_output=True, text=True, check=True)
    micros: float = json.loads(out.stdout.strip().splitlines()[-1])
    return micros


def report(title: str, best: dict[str, float]) -> None:
    """Print µs/request and the ratio to the baseline."""
    base = best["baseline (no logs, no metrics)"]
    print(title)
    print(f"  {'variant':36} {'us/resolve':>10} {'req/s/core':>11} {'vs baseline':>12}")
    for name, micros in best.items():
        print(f"  {name:36} {micros:10.1f} {1e6 / micros:11.0f} {base / micros:11.2f}x")


def main(argv: list[str] | None = None) -> int:
    """Run every variant in its own process, alternating, single- and multiprocess metrics."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.redis, args.child, args.requests)))
        return 0
    from bench.resolve import private_redis

    modes = {"single-process metrics": False, "multiprocess metrics (as under gunicorn)": True}
    best = {mode: {name: float("inf") for name in VARIANTS} for mode in modes}
    with private_redis() as (url, _data_dir), tempfile.TemporaryDirectory() as prom:
        for _ in range(args.rounds):
            for mode, multi in modes.items():
                for name in VARIANTS:
                    micros = run_child(url, name, args.requests, prom if multi else None)
                    best[mode][name] = min(best[mode][name], micros)
    for mode in modes:
        report(f"in-process WSGI, {mode}: {args.requests} resolves, best of {args.rounds} "
               "rounds, one process per variant and round", best[mode])
    return 0


if __name__ == "__main__":
    sys.exit(main())
