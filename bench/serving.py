"""The serving path in one run: resolve and ingest against bare apps, under stress.

    python -m bench.serving [--seconds 4] [--rounds 3] [--watches 200] [--python-load]

One private embedded valkey-server (seeded with bindings.example.json), the
router under deploy/gunicorn.conf.py (logs and metrics on as shipped) and two
separate baselines under the same config (bench/bare_apps.py). Prints:

1. resolve against the bare Flask app (alternating rounds; target >= 0.90);
2. resolve with `--watches` long-polls (GET /v1/bindings/watch) held open,
   against resolve with none (alternating; target >= 0.90);
3. resolve while Redis is hung (SIGSTOP) under single-trace load, against
   resolve under the same trace load with Redis answering (target >= 0.90),
   and how the traces were answered meanwhile;
4. single-trace ingest against the bare ingest app, which parses the same JSON
   body and makes one Redis round trip (alternating; target >= 0.80); with
   `--judge-sample R`, also single-trace ingest for a role whose gate names an
   online judge sampling R of its runs (queued at ingest; no judge runs here)
   against the same role's ingest with no judge (target >= 0.90);
5. the longest Redis script run while one 10,000-trace batch is stored (read
   from the server's SLOWLOG; target about 20 ms).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import redis

from bench.load import Sample, drive, gunicorn_app, have_wrk
from bench.resolve import (
    HEADERS,
    PATHS,
    TOKEN,
    alternate,
    print_table,
    private_redis,
    ratio_line,
    router_env,
    second_server_env,
)
from bench.serving_load import (
    INGEST_ROLE,
    OPERATOR,
    SINGLE,
    TRACE_HEADERS,
    TraceLoad,
    Watchers,
    _request,
    hung,
    open_connections,
    trace,
)
from gatekeeper.store.trace_keys import tally_key


def longest_script_ms(port: int, redis_url: str,
                      size: int) -> tuple[float, float, int, int]:
    """POST one `size`-trace batch; (longest and median EVAL/EVALSHA in ms, scripts run, HTTP status).

    SLOWLOG times a command by the wall clock: on a shared machine a script the
    scheduler preempted reads long. The median says what a script costs; a
    longest far above it is worth running again.
    """
    # One batch of two first: a fresh server answers the first EVALSHAs NOSCRIPT
    # (logged too, taking no time) before the script is loaded.
    _request(port, "POST", "/v1/traces",
             {"traces": [trace(f"warm-{time.time()}-{i}", i) for i in range(2)]}, token=TOKEN)
    connection = redis.Redis.from_url(redis_url)
    connection.config_set("slowlog-log-slower-than", 0)
    connection.config_set("slowlog-max-len", 100_000)
    connection.slowlog_reset()
    stamp = time.time()
    status, _ = _request(port, "POST", "/v1/traces",
                         {"traces": [trace(f"batch-{stamp}-{i}", i) for i in range(size)]},
                         token=TOKEN, timeout=120)
    entries = connection.slowlog_get(100_000)
    connection.config_set("slowlog-log-slower-than", 10_000)
    connection.close()
    scripts = [e for e in entries
               if (e["command"] if isinstance(e["command"], bytes) else
                   str(e["command"]).encode()).split(b" ", 1)[0].upper()
               in (b"EVAL", b"EVALSHA", b"FCALL")]
    durations = sorted(e["duration"] / 1e3 for e in scripts) or [0.0]
    return durations[-1], durations[len(durations) // 2], len(scripts), status


# -- the run ------------------------------------------------------------------------


def setup_ingest_role(port: int) -> None:
    """The ingest bench's role: current cfg_a, candidate cfg_b, no invariants to trip."""
    status, body = _request(port, "PUT", f"/v1/bindings/{INGEST_ROLE}",
                            {"current": "cfg_a", "candidate": "cfg_b"})
    if status not in (200, 201):
        raise SystemExit(f"creating {INGEST_ROLE} answered {status}: {body}")
    time.sleep(0.6)  # every worker's copy has it


def redis_pid(redis_url: str) -> int:
    """The Redis server's process id (INFO server)."""
    connection = redis.Redis.from_url(redis_url)
    try:
        return int(connection.info("server")["process_id"])
    finally:
        connection.close()


def main(argv: list[str] | None = None) -> int:
    """Run every part and print its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--watches", type=int, default=200)
    parser.add_argument("--trace-clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--python-load", action="store_true")
    parser.add_argument("--judge-sample", type=float, default=None,
                        help="part 4 also: ingest with an online judge sampling this share")
    parser.add_argument("--parts", default="1,2,3,4,5",
                        help="which figures to print, comma-separated (default: all five)")
    args = parser.parse_args(argv)
    parts = {int(p) for p in args.parts.split(",") if p.strip()}
    use_wrk = have_wrk() and not args.python_load
    print(f"serving bench: cpus={os.cpu_count()} workers={args.workers} "
          f"(deploy/gunicorn.conf.py), load={'wrk' if use_wrk else 'python'} "
          f"{args.connections} keep-alive connections, {args.rounds} rounds x "
          f"{args.seconds:g}s, alternating", flush=True)
    with private_redis() as (url, data_dir):
        env = router_env(url, data_dir)
        env["ROLEGATE_TOKENS"] += f",op={OPERATOR}:operator"
        bare_env = second_server_env(env, data_dir, "bare")
        log = os.path.join(data_dir, "router.log")
        with gunicorn_app("router:create_app()", env, args.workers, log) as (port, master), \
                gunicorn_app("bench.bare_apps:resolve_app()", bare_env,
                             args.workers) as (bport, bmaster), \
                gunicorn_app("bench.bare_apps:ingest_app()",
                             second_server_env(env, data_dir, "bare-ingest"),
                             args.workers) as (iport, imaster):
            setup_ingest_role(port)
            resolve = (port, master, PATHS, HEADERS)

            if 1 in parts:
                resolve_against_bare(resolve, bport, bmaster, args, use_wrk)
            if 2 in parts:
                resolve_with_watches(resolve, args, use_wrk)
            if 3 in parts:
                resolve_with_redis_hung(resolve, url, args, use_wrk)
            if 4 in parts:
                ingest_against_bare(port, master, iport, imaster, url, args, use_wrk)
                if args.judge_sample is not None:
                    ingest_with_judge(port, master, args, use_wrk)
            if 5 in parts:
                print(f"\n5. one {args.batch:,}-trace batch: the longest Redis script",
                      flush=True)
                longest, median, scripts, status = longest_script_ms(port, url, args.batch)
                print(f"  POST answered {status}; {scripts} script calls; longest "
                      f"{longest:.1f} ms (target about 20 ms), median {median:.1f} ms")
    return 0


def resolve_against_bare(resolve: tuple[Any, ...], bport: int, bmaster: int,
                         args: argparse.Namespace, use_wrk: bool) -> None:
    """Figure 1: resolve against the separate bare Flask app."""
    print("\n1. resolve against a separate bare Flask app", flush=True)
    rows = print_table(alternate({"bare Flask app (constant JSON)": (bport, bmaster, PATHS, HEADERS),
                                  "GET /v1/resolve": resolve},
                                 args.rounds, args.seconds, args.connections, use_wrk))
    ratio_line("resolve/bare", rows["GET /v1/resolve"],
               rows["bare Flask app (constant JSON)"], 0.90)


def resolve_with_watches(resolve: tuple[Any, ...], args: argparse.Namespace,
                         use_wrk: bool) -> None:
    """Figure 2: resolve with `--watches` long-polls held open, against none."""
    port, master = resolve[0], resolve[1]
    print(f"\n2. resolve with {args.watches} watches open", flush=True)
    calm: list[Sample] = []
    loaded: list[Sample] = []
    held = 0
    for _ in range(args.rounds):
        calm.append(drive(port, PATHS, HEADERS, args.seconds, args.connections,
                          master=master, use_wrk=use_wrk))
        with Watchers(port, args.watches) as watchers:
            held = max(held, open_connections(port) - args.connections)
            loaded.append(drive(port, PATHS, HEADERS, args.seconds, args.connections,
                                master=master, use_wrk=use_wrk))
        time.sleep(0.5)
    rows = print_table({"resolve, no watches": calm,
                        f"resolve, {args.watches} watches": loaded})
    print(f"  connections held open to the router meanwhile: about {held}; "
          f"watch answers {watchers.answered}, failures {watchers.failed}")
    ratio_line("with watches / without", rows[f"resolve, {args.watches} watches"],
               rows["resolve, no watches"], 0.90)


def resolve_with_redis_hung(resolve: tuple[Any, ...], url: str, args: argparse.Namespace,
                            use_wrk: bool) -> None:
    """Figure 3: resolve while Redis is hung under single-trace load, against Redis answering."""
    port, master = resolve[0], resolve[1]
    print(f"\n3. resolve with Redis hung (SIGSTOP) under {args.trace_clients} "
          "single-trace clients", flush=True)
    pid = redis_pid(url)
    answering: list[Sample] = []
    stopped: list[Sample] = []
    with TraceLoad(port, args.trace_clients) as load:
        time.sleep(1.0)
        load.snapshot()
        for _ in range(args.rounds):
            answering.append(drive(port, PATHS, HEADERS, args.seconds,
                                   args.connections, master=master, use_wrk=use_wrk))
            before, before_slowest = load.snapshot()
            with hung(pid):
                time.sleep(1.0)  # let the router find out
                stopped.append(drive(port, PATHS, HEADERS, args.seconds,
                                     args.connections, master=master, use_wrk=use_wrk))
                during, slowest = load.snapshot()
            time.sleep(2.0)  # recover
            # The 2 s after SIGCONT counted on their own: breakers still open
            # answer 503 there until their probe finds Redis back.
            recovery, _ = load.snapshot()
    rows = print_table({"resolve, trace load, Redis answering": answering,
                        "resolve, trace load, Redis hung": stopped})
    print(f"  traces while Redis answered (last round): {before}, slowest "
          f"{before_slowest:.2f} s; while hung: {during}, slowest {slowest:.2f} s; "
          f"2 s after SIGCONT: {recovery}")
    ratio_line("hung / answering", rows["resolve, trace load, Redis hung"],
               rows["resolve, trace load, Redis answering"], 0.90)


def ingest_against_bare(port: int, master: int, iport: int, imaster: int, url: str,
                        args: argparse.Namespace, use_wrk: bool) -> None:
    """Figure 4: single-trace ingest against the bare ingest app, with Redis's CPU per request."""
    print("\n4. single-trace ingest against a bare app (parse the JSON body, one "
          "Redis round trip)", flush=True)
    ingest: dict[str, list[Sample]] = {"bare ingest app": [], "POST /v1/traces": []}
    redis_cpu = dict.fromkeys(ingest, 0.0)
    connection = redis.Redis.from_url(url)
    tally = tally_key(INGEST_ROLE, "cfg_a")
    try:
        stored_before = int(connection.hget(tally, "n") or 0)
        for _ in range(args.rounds):
            for name, (p, m) in (("bare ingest app", (iport, imaster)),
                                 ("POST /v1/traces", (port, master))):
                before = redis_cpu_s(connection)
                ingest[name].append(drive(p, ["/v1/traces"], TRACE_HEADERS, args.seconds,
                                          args.connections, method="POST", body=SINGLE,
                                          master=m, use_wrk=use_wrk))
                redis_cpu[name] += redis_cpu_s(connection) - before
        stored = int(connection.hget(tally, "n") or 0) - stored_before
    finally:
        connection.close()
    rows = print_table(ingest)
    # Redis shares the cores with the workers: what it spends per request is the
    # part of the gap the worker CPU column does not show.
    per_request = {name: redis_cpu[name] / max(1, sum(s.requests for s in samples)) * 1e6
                   for name, samples in ingest.items()}
    print("  Redis CPU us/req: " + ", ".join(f"{name} {us:.0f}"
                                             for name, us in per_request.items()))
    # Every POST must be a new run: a repeated run id is answered as a duplicate,
    # a different (and cheaper for Redis, dearer for the worker) path.
    posted = sum(s.requests for s in ingest["POST /v1/traces"])
    print(f"  new traces stored by the POST rounds: {stored}, requests answered {posted} "
          "(a few more stored: requests in flight as a round ended)")
    ratio_line("single-trace ingest/bare", rows["POST /v1/traces"],
               rows["bare ingest app"], 0.80)


JUDGED_ROLE = INGEST_ROLE + "judged"
SINGLE_JUDGED = SINGLE.replace(f'"role": "{INGEST_ROLE}"', f'"role": "{JUDGED_ROLE}"')


def ingest_with_judge(port: int, master: int, args: argparse.Namespace, use_wrk: bool) -> None:
    """Figure 4b: single-trace ingest with an online judge sampling, against none."""
    print(f"\n4b. single-trace ingest with an online judge sampling {args.judge_sample:g} "
          "of the runs (queued at ingest), against no judge", flush=True)
    judge = {"url": "http://127.0.0.1:9/v1/chat/completions", "model": "bench",
             "sample_rate": args.judge_sample, "queue_max": 100_000,
             "max_calls_per_day": 1_000_000}
    status, body = _request(port, "PUT", f"/v1/bindings/{JUDGED_ROLE}",
                            {"current": "cfg_a", "candidate": "cfg_b",
                             "gate": {"judge": judge}})
    if status not in (200, 201):
        raise SystemExit(f"creating {JUDGED_ROLE} answered {status}: {body}")
    time.sleep(0.6)  # every worker's copy has it
    ingest: dict[str, list[Sample]] = {"POST /v1/traces, no judge": [],
                                       "POST /v1/traces, judge sampling": []}
    bodies = {"POST /v1/traces, no judge": SINGLE,
              "POST /v1/traces, judge sampling": SINGLE_JUDGED}
    for _ in range(args.rounds):
        for name, samples in ingest.items():
            samples.append(drive(port, ["/v1/traces"], TRACE_HEADERS, args.seconds,
                                 args.connections, method="POST", body=bodies[name],
                                 master=master, use_wrk=use_wrk))
    rows = print_table(ingest)
    ratio_line("ingest judged/unjudged", rows["POST /v1/traces, judge sampling"],
               rows["POST /v1/traces, no judge"], 0.90)


def redis_cpu_s(connection: redis.Redis) -> float:
    """CPU seconds (user + system, every thread) the Redis server has used so far (INFO cpu)."""
    info = connection.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

if __name__ == "__main__":
    sys.exit(main())
