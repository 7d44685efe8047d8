"""OFREP against resolve, and one send per answer against two, on the same router, in one run.

    python -m bench.ofrep [--seconds 4] [--rounds 4] [--connections 8] [--python-load]

Starts a private embedded valkey-server seeded with bindings.example.json and
two routers under deploy/gunicorn.conf.py with the same workers: one as
shipped (each answer's headers and body in one send, `router.server.one_send`)
and one with `ROLEGATE_ONE_SEND=0` (gunicorn's two sends), logs and metrics on
in both. The load (wrk when installed, else the Python keep-alive generator)
alternates over the targets for `--rounds` rounds, so drift on this shared
machine hits all alike:

- `GET /v1/resolve/summarizer?key=...` with a caller token;
- `POST /ofrep/v1/evaluate/flags/summarizer`, a context with a fresh
  targetingKey per request (what an OpenFeature provider sends);
- `POST /ofrep/v1/evaluate/flags` (bulk: every role the token may act on).

Prints req/s, p50, p99 and the router workers' CPU per request for each, then
the ratios by requests per server CPU-second, the measure that does not move
with what else the machine runs: OFREP single / resolve (target >= 0.87, issue
38), bulk / resolve, and one send / two sends for resolve and OFREP.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from bench.load import Sample, gunicorn_app, have_wrk
from bench.resolve import (
    HEADERS,
    PATHS,
    ROLE,
    TOKEN,
    Summary,
    private_redis,
    router_env,
    second_server_env,
    summarize,
)

OFREP_SINGLE = [f"/ofrep/v1/evaluate/flags/{ROLE}"]
OFREP_BULK = ["/ofrep/v1/evaluate/flags"]
#: RUNID becomes a fresh value per request (bench.load): a new job key each time.
CONTEXT = json.dumps({"context": {"targetingKey": "RUNID", "tenant": "acme"}})
JSON_HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
#: One target: (port, master pid, paths, headers, method, body).
Target = tuple[int, int, list[str], dict[str, str], str, str | None]


def alternate(targets: dict[str, Target], rounds: int, seconds: float, connections: int,
              use_wrk: bool) -> dict[str, list[Sample]]:
    """Run each target once per round, in turn, after a short warm-up of each."""
    from bench.load import drive

    for port, _master, paths, headers, method, body in targets.values():
        drive(port, paths, headers, 1.0, connections, method=method, body=body,
              use_wrk=use_wrk)
    out: dict[str, list[Sample]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, (port, master, paths, headers, method, body) in targets.items():
            out[name].append(drive(port, paths, headers, seconds, connections, method=method,
                                   body=body, master=master, use_wrk=use_wrk))
    return out


def per_cpu_second(row: tuple[float, ...]) -> float:
    """Requests per server CPU-second from a summary row (its CPU µs per request)."""
    return 1e6 / row[4] if row[4] else float("nan")


def print_rows(results: dict[str, list[Sample]]) -> dict[str, Summary]:
    """One line per target: req/s, latency, errors, CPU per request and per CPU-second."""
    rows = {name: summarize(samples) for name, samples in results.items()}
    print(f"  {'target':<44} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
          f"{'cpu us/req':>10} {'req/cpu-s':>9}")
    for name, row in rows.items():
        rps, p50, p99, errors, cpu_us = row
        print(f"  {name:<44} {rps:>7.0f} {p50:>7.2f} {p99:>7.2f} {errors:>6} {cpu_us:>10.0f}"
              f" {per_cpu_second(row):>9.0f}")
    return rows


def ratio(label: str, thing: tuple[float, ...], base: tuple[float, ...],
          target: float | None = None) -> float:
    """Print thing/base in requests per server CPU-second (and against `target`)."""
    value = per_cpu_second(thing) / per_cpu_second(base)
    verdict = "" if target is None else (
        f" ({'meets' if value >= target else 'misses'} the {target:.2f} target)")
    print(f"  {label}: {value:.2f} by requests per server CPU-second{verdict}; "
          f"{thing[0] / base[0] if base[0] else float('nan'):.2f} by req/s")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per round")
    parser.add_argument("--rounds", type=int, default=4, help="alternations over the targets")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--python-load", action="store_true",
                        help="use the Python load generator even when wrk is installed")
    args = parser.parse_args(argv)
    use_wrk = have_wrk() and not args.python_load
    print(f"OFREP vs resolve, one send vs two: cpus={os.cpu_count()} workers={args.workers} "
          f"(deploy/gunicorn.conf.py), load={'wrk' if use_wrk else 'python'} "
          f"{args.connections} keep-alive connections, {args.rounds} rounds x "
          f"{args.seconds:g}s each, alternating, loopback")
    with private_redis() as (url, data_dir):
        env = router_env(url, data_dir)
        two_env = {**second_server_env(env, data_dir, "two"), "ROLEGATE_ONE_SEND": "0"}
        with gunicorn_app("router:create_app()", env, args.workers,
                          os.path.join(data_dir, "router.log")) as (port, master), \
                gunicorn_app("router:create_app()", two_env, args.workers,
                             os.path.join(data_dir, "router-two.log")) as (port2, master2):
            results = alternate({
                "GET /v1/resolve (one send)": (port, master, PATHS, HEADERS, "GET", None),
                "POST OFREP single (one send)": (port, master, OFREP_SINGLE, JSON_HEADERS,
                                                 "POST", CONTEXT),
                "POST OFREP bulk (one send)": (port, master, OFREP_BULK, JSON_HEADERS, "POST",
                                               CONTEXT),
                "GET /v1/resolve (two sends)": (port2, master2, PATHS, HEADERS, "GET", None),
                "POST OFREP single (two sends)": (port2, master2, OFREP_SINGLE, JSON_HEADERS,
                                                  "POST", CONTEXT),
            }, args.rounds, args.seconds, args.connections, use_wrk)
    rows = print_rows(results)
    resolve, single, bulk, resolve2, single2 = rows.values()
    ratio("OFREP single / resolve", single, resolve, 0.87)
    ratio("OFREP bulk / resolve (one answer for every role)", bulk, resolve)
    ratio("resolve, one send / two sends", resolve, resolve2)
    ratio("OFREP single, one send / two sends", single, single2)
    errors = sum(row[3] for row in rows.values())
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
