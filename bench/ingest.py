"""Trace ingest throughput and gate latency, against one gunicorn router, in one run.

    .venv/bin/python bench/ingest.py [--seconds 5] [--clients 4] [--batch 500] [--window 100000]

Starts its own redis-server and gunicorn (deploy/gunicorn.conf.py, 2
workers) on free loopback ports; touches no other Redis. The baseline is a
separate minimal Flask app under the same gunicorn config,
`bench.bare_apps:ingest_app()`: it parses the same JSON body and makes one
Redis round trip, with no rolegate code. Then, with `--clients` client
processes on keep-alive connections, each for `--seconds`:

1. bare and single-trace POSTs, alternated twice (the machine is shared: the
   alternation spreads drift over both), the same single-trace body for both;
2. batched POSTs of `--batch` traces each (every run_id unique);
3. tops the candidate window up to `--window` traces, then times
   `GET /v1/roles/<role>/gate` (median of 15) over that window.

Prints traces/s batched, single-POST and bare rates and their ratio, each
phase's gunicorn-worker CPU per request (read from /proc: unlike the rates it
barely moves with the load other processes put on the machine), and the gate's
latency: the aggregate part alone; the drift section replayed from the streams
as it was built before its detectors were kept (the baseline); the whole
endpoint while cold detectors catch up, once caught up, and with a `--batch`
of new runs posted before each read. Targets (issue 3): >= 10,000 traces/s
batched; single >= 0.8 x bare; gate < 0.5 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_resolve import free_port, redis_server, wait_until  # noqa: E402

OPERATOR = "bench-operator"
CALLER = "bench-caller"
ROLE = "summarizer"
HEADERS = {"Authorization": f"Bearer {CALLER}", "Content-Type": "application/json"}
GATE: dict[str, Any] = {"thresholds": {"min_samples": 50, "min_pass_rate": 0.9, "p95_step_ceiling": 12,
                       "max_mean_cost_usd": 0.04},
        "invariants": {"artifact_exists": ["output/result.md"], "must_contain_table": True,
                       "forbidden_tools": ["web_write", "external_egress"],
                       "max_steps": 12, "max_cost_usd": 0.04}}
OUTPUT = ("Summary of the quarter.\n\n| region | revenue | growth |\n|---|---:|---:|\n"
          "| north | 1200 | 4% |\n| south | 900 | -1% |\n")


def trace_template(arm: str, tools_n: int) -> dict[str, Any]:
    """One realistic trace body with RUNID where the run id goes."""
    tools = ["read_file", "search", "read_file", "summarize", "write_file"][:tools_n]
    return {
        "run_id": "RUNID", "role": ROLE, "config": "cfg_b" if arm != "current" else "cfg_a",
        "arm": arm, "key": "job-RUNID", "tools": tools, "tool_errors": 0, "answered": True,
        "cost_usd": 0.0123, "tokens": 1840, "latency_s": 4.2,
        "artifacts": ["output/result.md"], "output_text": OUTPUT,
        "stamps": {"agent_version": "2026.07.06", "instruction_hash": "sha256:9f2c",
                   "model_id": "model-x", "tool_schema_hash": "sha256:11ab"},
    }


def batch_template(size: int) -> str:
    """A batch body whose run ids are RUNID-<i>, to be made unique by one replace."""
    traces = []
    for i in range(size):
        body = json.dumps(trace_template("candidate", 3 + i % 3))
        traces.append(body.replace("RUNID", f"RUNID-{i}"))
    return '{"traces": [' + ",".join(traces) + "]}"


#: An ingest quota no bench reaches (the default's 50,000 traces and 16 MB a second are).
BENCH_QUOTA = "traces=100000000,bytes=100000000000"


@contextmanager
def gunicorn_router(redis_url: str,
                    app_spec: str = "router:create_app()") -> Iterator[tuple[str, int]]:
    """`app_spec` under deploy/gunicorn.conf.py on a free port; yields its URL and pid."""
    port = free_port()
    # A data dir of its own: the gunicorn config locks it, so two servers never share one.
    data_dir = tempfile.mkdtemp(prefix="rolegate-bench-")
    env = dict(os.environ, REDIS_URL=redis_url, ROLEGATE_BIND=f"127.0.0.1:{port}",
               ROLEGATE_WORKERS="2", ROLEGATE_LOG_LEVEL="warning", ROLEGATE_DATA_DIR=data_dir,
               ROLEGATE_TOKENS=f"{OPERATOR}:operator,{CALLER}:caller",
               # Charged on every request as by default, but never reached: on an idle
               # machine one token's bench load passes the default 16 MB/s, and a refused
               # batch costs its parse and checks for no stored trace.
               ROLEGATE_INGEST_QUOTA=BENCH_QUOTA)
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    process = subprocess.Popen(
        [gunicorn, "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "--chdir", str(ROOT),
         app_spec],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url), "gunicorn")
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(15)
        shutil.rmtree(data_dir, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


def _client(args: tuple[int, str, str, str, float, float]) -> tuple[int, float]:
    """One client process: POST `template` (RUNID made unique) until the deadline."""
    worker, port, path, template, start_at, seconds = args
    connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    done = 0
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.time() < deadline:
        body = template.replace("RUNID", f"w{worker}-{start_at}-{done}")
        connection.request("POST", path, body=body, headers=HEADERS)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"{path} answered {response.status}")
        done += 1
    connection.close()
    return done, time.time() - start_at


def worker_cpu_s(master: int) -> float:
    """CPU seconds the gunicorn workers of `master` have used so far (Linux /proc)."""
    try:
        with open(f"/proc/{master}/task/{master}/children") as listing:
            workers = listing.read().split()
    except OSError:
        return 0.0
    total = 0
    for pid in workers:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a worker that just exited
        total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def phase(pool: Any, port: int, path: str, template: str, clients: int,
          seconds: float, master: int = 0) -> tuple[float, float]:
    """(requests per second, worker CPU µs per request) over `seconds` with `clients` clients."""
    start_at = time.time() + 0.3
    jobs = [(w, str(port), path, template, start_at, seconds) for w in range(clients)]
    cpu_before = worker_cpu_s(master) if master else 0.0
    results = pool.map(_client, jobs)
    cpu = (worker_cpu_s(master) - cpu_before) if master else 0.0
    total = sum(done for done, _ in results)
    elapsed = max(spent for _, spent in results)
    return float(total / elapsed), cpu / max(total, 1) * 1e6


def window_n(redis_url: str) -> int:
    """Traces in the candidate arm's current-stage window, read from its aggregate."""
    from bindings.store import BindingStore
    from gatekeeper.store.trace_keys import epoch_of
    from gatekeeper.store.traces import TraceStore

    connection = redis.Redis.from_url(redis_url)
    try:
        binding = BindingStore(connection).get(ROLE).binding
        return TraceStore(connection).window(ROLE, "cfg_b", "candidate", epoch_of(binding)).n
    finally:
        connection.close()


def _gets(session: requests.Session, url: str, rounds: int,
          between: Any = None) -> tuple[list[float], dict[str, Any]]:
    """Time `rounds` GET /gate (calling `between()` untimed before each); the last answer."""
    timings, view = [], {}
    for _ in range(rounds):
        if between is not None:
            between()
        started = time.perf_counter()
        r = session.get(f"{url}/v1/roles/{ROLE}/gate", headers=HEADERS, timeout=60)
        timings.append(time.perf_counter() - started)
        r.raise_for_status()
        view = r.json()
    return timings, view


def _ms(timings: list[float]) -> str:
    return f"median {statistics.median(timings) * 1e3:.1f} ms, max {max(timings) * 1e3:.1f} ms"


def replayed_drift(connection: redis.Redis) -> dict[str, Any]:
    """The drift section as it was built before its detectors were kept: a full replay."""
    from bindings.store import BindingStore
    from gatekeeper.stats.drift import drift_view
    from gatekeeper.store.traces import TraceStore
    from gatekeeper.view.sections import REFERENCE_RUNS, candidate_arm, latest, since

    traces = TraceStore(connection)
    binding = BindingStore(connection).get(ROLE).binding
    assert binding.candidate is not None
    reference = latest(traces, ROLE, binding.current, "current", REFERENCE_RUNS)
    candidate = since(traces, ROLE, binding.candidate, candidate_arm(binding.stage),
                      binding.stage_since)
    return drift_view(candidate, reference, binding.gate.drift)


def time_gate(url: str, redis_url: str, batch: str, rounds: int = 15) -> None:
    """Time GET /gate, its aggregate part and its drift part, over the filled window.

    The drift part both ways in one run: replayed from the streams (as before)
    and advanced from the kept detectors (cold, catching up, then steady).
    """
    from bindings.store import BindingStore
    from gatekeeper.store.drift_state import DRIFT_KEY_TEMPLATE, MAX_ADVANCE
    from gatekeeper.store.traces import TraceStore
    from gatekeeper.view import arms_section, comparison_section, gate_context

    connection = redis.Redis.from_url(redis_url)
    store, traces = BindingStore(connection), TraceStore(connection)
    core, replayed = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        ctx = gate_context(store, traces, ROLE, time.time())
        arms_section(ctx), comparison_section(ctx)
        core.append(time.perf_counter() - started)
    for _ in range(rounds):
        started = time.perf_counter()
        replayed_drift(connection)
        replayed.append(time.perf_counter() - started)
    n = traces.window(ROLE, "cfg_b", "candidate", epoch_now(connection)).n
    print(f"  gate over window n={n:,}: aggregates+verdicts+comparison (in-process) "
          f"{_ms(core)}")
    print(f"  drift section replayed from the streams (before; in-process) {_ms(replayed)}")

    # Cold: no kept detectors, every arm has the whole window ahead of it.
    stale = connection.keys(DRIFT_KEY_TEMPLATE.format(role=ROLE, config="*", arm="*",
                                                      epoch="*", metric="*"))
    if stale:
        connection.delete(*stale)
    session = requests.Session()
    catching: list[float] = []
    view: dict[str, Any] = {}
    while not view.get("drift", {}).get("caught_up") and len(catching) < 200:
        spent, view = _gets(session, url, 1)
        catching += spent
    print(f"  GET /gate, cold detectors catching up (<= {MAX_ADVANCE:,} runs per arm per read): "
          f"{len(catching)} reads, first {catching[0] * 1e3:.1f} ms, {_ms(catching)}")
    idle, view = _gets(session, url, rounds)
    cusum = view["drift"]["candidate"]["run_failure"]
    print(f"  GET /v1/roles/{ROLE}/gate (every section), detectors caught up (n={cusum['n']:,}), "
          f"no new runs: {_ms(idle)}   (target < 500 ms)")
    port = int(url.rsplit(":", 1)[1])
    runs_per = batch.count('"run_id"')
    count = iter(range(10 ** 6))
    stamp = time.time()

    def post_batch() -> None:
        poster = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        poster.request("POST", "/v1/traces", headers=HEADERS,
                       body=batch.replace("RUNID", f"gate{next(count)}-{stamp}"))
        response = poster.getresponse()
        response.read()
        poster.close()
        if response.status != 200:
            raise SystemExit(f"/v1/traces answered {response.status}")

    fresh, view = _gets(session, url, rounds, post_batch)
    session.close()
    cusum = view["drift"]["candidate"]["run_failure"]
    print(f"  GET /v1/roles/{ROLE}/gate (every section), {runs_per} new runs before each read "
          f"(n={cusum['n']:,}, caught_up={view['drift']['caught_up']}): {_ms(fresh)}")
    print(f"  drift before/after (median, steady, {runs_per} new runs per read): replay "
          f"{statistics.median(replayed) * 1e3:.1f} ms vs whole view "
          f"{statistics.median(fresh) * 1e3:.1f} ms: "
          f"{statistics.median(replayed) / statistics.median(fresh):.1f}x")
    connection.close()


def epoch_now(connection: redis.Redis) -> str:
    """The role's current window epoch."""
    from bindings.store import BindingStore
    from gatekeeper.store.trace_keys import epoch_of

    return epoch_of(BindingStore(connection).get(ROLE).binding)


def main() -> None:
    """Run every phase against one private router and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--window", type=int, default=100_000)
    args = parser.parse_args()

    single = json.dumps(trace_template("current", 4))
    batch = batch_template(args.batch)
    with redis_server() as redis_url, gunicorn_router(redis_url) as (url, master), \
            gunicorn_router(redis_url, "bench.bare_apps:ingest_app()") as (bare_url, bare_master):
        bare_port = int(bare_url.rsplit(":", 1)[1])
        port = int(url.rsplit(":", 1)[1])
        op = {"Authorization": f"Bearer {OPERATOR}"}
        requests.put(f"{url}/v1/bindings/{ROLE}", headers=op, timeout=10, json={
            "current": "cfg_a", "candidate": "cfg_b", "gate": GATE}).raise_for_status()
        requests.post(f"{url}/v1/bindings/{ROLE}/canary", headers=op, timeout=10,
                      json={"share": 0.1, "reason": "bench"}).raise_for_status()
        time.sleep(0.5)  # every worker's binding copy sees the canary
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.clients) as pool:
            print(f"ingest bench: 2 gunicorn workers, {args.clients} client processes, "
                  f"{args.seconds:g} s per phase, {os.cpu_count()} cores (shared)")
            bare_runs, single_runs = [], []
            for _ in range(2):
                bare_runs.append(phase(pool, bare_port, "/v1/traces", single, args.clients,
                                       args.seconds, bare_master))
                single_runs.append(phase(pool, port, "/v1/traces", single, args.clients,
                                         args.seconds, master))
            batches, batch_cpu = phase(pool, port, "/v1/traces", batch, args.clients,
                                       args.seconds, master)
            bare = statistics.mean(r for r, _ in bare_runs)
            one = statistics.mean(r for r, _ in single_runs)
            bare_cpu = statistics.mean(c for _, c in bare_runs)
            one_cpu = statistics.mean(c for _, c in single_runs)
            print(f"  bare ingest app POST      {bare:9.0f} req/s   "
                  f"(rounds: {', '.join(f'{r:.0f}' for r, _ in bare_runs)}); "
                  f"worker CPU {bare_cpu:.0f} µs/req")
            print(f"  single-trace POST         {one:9.0f} req/s   "
                  f"(rounds: {', '.join(f'{r:.0f}' for r, _ in single_runs)}); "
                  f"worker CPU {one_cpu:.0f} µs/req")
            print(f"  single / bare             {one / bare:9.2f}      (target >= 0.80; "
                  f"by worker CPU per request {bare_cpu / one_cpu:.2f})")
            print(f"  batched POST ({args.batch}/req)   {batches * args.batch:9.0f} traces/s "
                  f"({batches:.1f} req/s; worker CPU {batch_cpu / args.batch:.0f} µs/trace; "
                  f"target >= 10,000)", flush=True)
            # Fill the candidate window up to --window traces (untimed), then time the gate.
            while window_n(redis_url) < args.window:
                phase(pool, port, "/v1/traces", batch, args.clients, 2.0)
        time_gate(url, redis_url, batch)


if __name__ == "__main__":
    main()
