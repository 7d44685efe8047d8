"""Resolve against a separate bare Flask app, same gunicorn config, alternating rounds, one run.

    python -m bench.resolve [--seconds 4] [--rounds 4] [--connections 8] [--python-load]

Starts a private embedded valkey-server (the one `rolegate serve` uses) seeded
with bindings.example.json, then two gunicorns under deploy/gunicorn.conf.py
with the same workers: the real router (`router:create_app()`, logs and
metrics on as shipped, its JSON lines written to a file) and the baseline,
`bench.bare_apps:resolve_app()`, a separate minimal Flask app with one route
answering a constant JSON body of a resolve's size (no rolegate code at all).
The load (wrk when installed, else a Python keep-alive generator) alternates
between the two for `--rounds` rounds, so drift on this shared machine hits
both alike. Resolve sends a caller token and cycles over 1,000 job keys; the
baseline gets the same requests. Prints req/s, p50, p99 and the workers' CPU
per request for each, and the ratios (target: resolve/bare >= 0.90).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.load import Sample, drive, gunicorn_app, have_wrk

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-caller-token"
ROLE = "summarizer"
PATHS = [f"/v1/resolve/{ROLE}?key=job-{i:03d}" for i in range(1000)]
#: --attributes: the job's tenant too, after the key (the fast path's) or before it (the
#: Flask view's: the fast path hands on any other order).
WITH_ATTRIBUTES = [f"{path}&attr.tenant=t{i % 50}" for i, path in enumerate(PATHS)]
ATTRIBUTES_FIRST = [f"/v1/resolve/{ROLE}?attr.tenant=t{i % 50}&key=job-{i:03d}"
                    for i in range(1000)]
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


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


def router_env(redis_url: str, data_dir: str) -> dict[str, str]:
    """The router's environment in the benches: private Redis and data dir, a caller token."""
    return {"REDIS_URL": redis_url, "ROLEGATE_TOKENS": f"bench={TOKEN}:caller",
            "ROLEGATE_DATA_DIR": data_dir,
            "PROMETHEUS_MULTIPROC_DIR": os.path.join(data_dir, "prometheus")}


def second_server_env(env: dict[str, str], data_dir: str, name: str) -> dict[str, str]:
    """`env` for another server beside the router: its own data dir and metrics dir (the
    gunicorn master locks its data dir, `router.server.gunicorn_conf`)."""
    own = os.path.join(data_dir, name)
    os.makedirs(own, exist_ok=True)
    return {**env, "ROLEGATE_DATA_DIR": own,
            "PROMETHEUS_MULTIPROC_DIR": os.path.join(data_dir, f"prometheus-{name}")}


@contextmanager
def router_and_bare(redis_url: str, data_dir: str,
                    workers: int) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """The router and the bare resolve app, each under deploy/gunicorn.conf.py."""
    env = router_env(redis_url, data_dir)
    bare_env = second_server_env(env, data_dir, "bare")
    log = os.path.join(data_dir, "router.log")
    with gunicorn_app("router:create_app()", env, workers, log) as routed, \
            gunicorn_app("bench.bare_apps:resolve_app()", bare_env, workers) as bare:
        yield routed, bare


#: What `summarize` gives a target: req/s, p50 ms, p99 ms, errors, CPU us per request.
Summary = tuple[float, float, float, int, float]


def summarize(samples: list[Sample]) -> Summary:
    """req/s, p50 ms, p99 ms (worst round), errors, worker CPU µs/request over `samples`."""
    done = sum(s.requests for s in samples)
    seconds = sum(s.seconds for s in samples)
    p50 = sorted(s.p50 for s in samples)[len(samples) // 2] * 1e3
    p99 = max(s.p99 for s in samples) * 1e3
    cpu_us = sum(s.cpu for s in samples) / max(1, done) * 1e6
    return done / seconds, p50, p99, sum(s.errors for s in samples), cpu_us


def alternate(targets: dict[str, tuple[int, int, list[str], dict[str, str]]], rounds: int,
              seconds: float, connections: int, use_wrk: bool) -> dict[str, list[Sample]]:
    """Run each target once per round, in turn; a short warm-up round first."""
    for port, _master, paths, headers in targets.values():
        drive(port, paths, headers, 1.0, connections, use_wrk=use_wrk)
    out: dict[str, list[Sample]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, (port, master, paths, headers) in targets.items():
            out[name].append(drive(port, paths, headers, seconds, connections, master=master,
                                   use_wrk=use_wrk))
    return out


def print_table(results: dict[str, list[Sample]]) -> dict[str, Summary]:
    """Print one row per target; return the summaries."""
    rows = {name: summarize(samples) for name, samples in results.items()}
    print(f"  {'endpoint':<34} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
          f"{'cpu us/req':>10}   rounds req/s")
    for name, (rps, p50, p99, errors, cpu_us) in rows.items():
        per_round = ", ".join(f"{s.requests / s.seconds:.0f}" for s in results[name])
        print(f"  {name:<34} {rps:>8.0f} {p50:>7.2f} {p99:>7.2f} {errors:>6} {cpu_us:>10.0f}"
              f"   {per_round}")
    return rows


def ratio_line(label: str, thing: tuple[float, ...], base: tuple[float, ...],
               target: float) -> float:
    """Print thing/base by req/s and by CPU per request; return the req/s ratio."""
    ratio = thing[0] / base[0] if base[0] else float("nan")
    verdict = "meets" if ratio >= target else "misses"
    by_cpu = base[4] / thing[4] if thing[4] else float("nan")
    print(f"  {label}: {ratio:.2f} by req/s ({verdict} the {target:.2f} target); "
          f"{by_cpu:.2f} by worker CPU per request")
    return ratio


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of bare/resolve")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--python-load", action="store_true",
                        help="use the Python load generator even when wrk is installed")
    parser.add_argument("--attributes", action="store_true",
                        help="also resolve with ?attr.tenant=, through the fast path and the "
                             "Flask view")
    args = parser.parse_args(argv)
    use_wrk = have_wrk() and not args.python_load
    print(f"resolve vs a separate bare Flask app: cpus={os.cpu_count()} workers={args.workers} "
          f"(deploy/gunicorn.conf.py), load={'wrk' if use_wrk else 'python'} "
          f"{args.connections} keep-alive connections, {args.rounds} rounds x "
          f"{args.seconds:g}s each, alternating, loopback")
    with private_redis() as (url, data_dir), \
            router_and_bare(url, data_dir, args.workers) as ((rport, rmaster), (bport, bmaster)):
        contenders = {
            "bare Flask app (constant JSON)": (bport, bmaster, PATHS, HEADERS),
            "GET /v1/resolve (logs+metrics on)": (rport, rmaster, PATHS, HEADERS),
        }
        if args.attributes:
            contenders["resolve key&attr (fast path)"] = (rport, rmaster, WITH_ATTRIBUTES,
                                                          HEADERS)
            contenders["resolve attr&key (Flask view)"] = (rport, rmaster, ATTRIBUTES_FIRST,
                                                           HEADERS)
        results = alternate(contenders, args.rounds, args.seconds, args.connections, use_wrk)
    rows = print_table(results)
    bare, resolve, *attributed = rows.values()
    ratio_line("resolve/bare", resolve, bare, 0.90)
    if attributed:
        ratio_line("key&attr fast/bare", attributed[0], bare, 0.90)
        ratio_line("attr&key Flask/bare", attributed[1], bare, 0.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
