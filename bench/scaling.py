"""One Redis against a Redis Cluster, one router against two, in one run: ingest and resolves.

    .venv/bin/python -m bench.scaling [--seconds 4] [--clients 4] [--roles 20] [--batch 100]
                                      [--rounds 2]

Starts its own redis-server and a three-master Redis Cluster on loopback (the
same one the tests use, tests/cluster.py), seeds `--roles` roles on each, and
runs gunicorn routers (deploy/gunicorn.conf.py, one worker each, so
"two routers" means twice the serving processes) in three setups:

1. one Redis, one router;
2. the Cluster, one router;
3. the Cluster, two routers (the clients split between them).

Each setup runs two phases of `--seconds` with `--clients` client processes on
keep-alive connections: batched trace ingest (`--batch` traces per POST, spread
over every role) and HTTP resolves (every role, 1,000 job keys). It prints the
rates, the ratios (Cluster / one Redis, two routers / one), the per-operation
costs the sizing in docs/scaling.md is computed from (router CPU per resolve
and per trace, Redis CPU per trace, summed over the masters; memory per stored
trace and per run-id key), and how the keys spread over the masters. The three
setups run `--rounds` times in turn, so drift on a shared machine hits them
alike; each figure is the best round (highest rate, lowest CPU per operation).

The machine's cores are shared by the load generator, the routers and every
Redis: the rates say how the pieces compare on this box, the per-operation CPU
costs are what carries over to a real deployment.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
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
from bench.ingest import trace_template, worker_cpu_s
from tests.cluster import OwnCluster, started_cluster

OPERATOR = "bench-operator"
CALLER = "bench-caller"
TOKENS = f"{OPERATOR}:operator,{CALLER}:caller"


def roles(count: int) -> list[str]:
    """The bench's role names."""
    return [f"role-{i:02d}" for i in range(count)]


def batch_template(names: list[str], size: int) -> str:
    """A batch of `size` current-arm traces spread over every role; RUNID made unique later."""
    traces = []
    for i in range(size):
        body = trace_template("current", 3 + i % 3)
        body["role"] = names[i % len(names)]
        traces.append(json.dumps(body).replace("RUNID", f"RUNID-{i}"))
    return '{"traces": [' + ",".join(traces) + "]}"


@contextmanager
def router(redis_url: str) -> Iterator[tuple[int, int]]:
    """One gunicorn router (one worker) on a free port; yields (port, master pid)."""
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_url, ROLEGATE_BIND=f"127.0.0.1:{port}",
               ROLEGATE_WORKERS="1", ROLEGATE_LOG_LEVEL="warning", ROLEGATE_LOG_RESOLVES="0",
               ROLEGATE_ACCESS_LOG="", ROLEGATE_TOKENS=TOKENS)
    env.pop("REDIS_SENTINELS", None)
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    process = subprocess.Popen(
        [gunicorn, "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "--chdir", str(ROOT),
         "router:create_app()"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _healthy(port), "gunicorn", timeout=60)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(15)


def _healthy(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


def seed(port: int, names: list[str]) -> None:
    """Create every role (stable on cfg_a) through the router."""
    for role in names:
        answer = requests.put(f"http://127.0.0.1:{port}/v1/bindings/{role}",
                              json={"current": "cfg_a"},
                              headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=10)
        if answer.status_code not in (200, 201):
            raise SystemExit(f"seeding {role}: {answer.status_code} {answer.text}")


def _client(args: tuple[int, int, str, list[str], str, float, float]) -> int:
    """One client process: requests until the deadline; returns how many were answered."""
    worker, port, method, paths, template, start_at, seconds = args
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {CALLER}", "Content-Type": "application/json"}
    done = 0
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.time() < deadline:
        path = paths[(worker * 7919 + done) % len(paths)]
        body = template.replace("RUNID", f"w{worker}-{start_at}-{done}") if template else None
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"{method} {path} answered {response.status}")
        done += 1
    connection.close()
    return done


def redis_cpu_s(urls: list[str]) -> float:
    """CPU seconds the Redis servers at `urls` have used (INFO cpu, main thread and children)."""
    total = 0.0
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            info = client.info("cpu")
        finally:
            client.close()
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def phase(pool: Any, ports: list[tuple[int, int]], method: str, paths: list[str],
          template: str, clients: int, seconds: float,
          redis_urls: list[str]) -> dict[str, float]:
    """Requests/s, router CPU µs and Redis CPU µs per request, clients spread over routers."""
    start_at = time.time() + 0.3
    jobs = [(w, ports[w % len(ports)][0], method, paths, template, start_at, seconds)
            for w in range(clients)]
    router_before = sum(worker_cpu_s(pid) for _, pid in ports)
    redis_before = redis_cpu_s(redis_urls)
    done = sum(pool.map(_client, jobs))
    router_cpu = sum(worker_cpu_s(pid) for _, pid in ports) - router_before
    redis_cpu = redis_cpu_s(redis_urls) - redis_before
    return {"rate": done / seconds, "requests": float(done),
            "router_us": router_cpu / max(done, 1) * 1e6,
            "redis_us": redis_cpu / max(done, 1) * 1e6}


def run_setup(pool: Any, name: str, redis_url: str, redis_urls: list[str], routers: int,
              args: argparse.Namespace, names: list[str]) -> dict[str, dict[str, float]]:
    """Both phases against `routers` routers on `redis_url`."""
    with ExitStack() as stack:
        ports = [stack.enter_context(router(redis_url)) for _ in range(routers)]
        seed(ports[0][0], names)
        batch = batch_template(names, args.batch)
        ingest = phase(pool, ports, "POST", ["/v1/traces"], batch, args.clients, args.seconds,
                       redis_urls)
        paths = [f"/v1/resolve/{names[i % len(names)]}?key=job-{i}" for i in range(1000)]
        resolve = phase(pool, ports, "GET", paths, "", args.clients, args.seconds, redis_urls)
    traces = {**ingest, "rate": ingest["rate"] * args.batch,
              "router_us": ingest["router_us"] / args.batch,
              "redis_us": ingest["redis_us"] / args.batch}
    print(f"{name:<28} {traces['rate']:>10,.0f} traces/s {resolve['rate']:>9,.0f} resolves/s"
          f"   router CPU {traces['router_us']:6.1f} µs/trace {resolve['router_us']:6.1f} "
          f"µs/resolve   Redis CPU {traces['redis_us']:5.1f} µs/trace", flush=True)
    return {"traces": traces, "resolves": resolve}


def flush(redis_url: str) -> None:
    """Empty the bench's own single Redis between rounds."""
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def best(results: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per phase: the highest rate and the lowest CPU per operation over the rounds."""
    out: dict[str, dict[str, float]] = {}
    for what in ("traces", "resolves"):
        phases = [r[what] for r in results]
        out[what] = {"rate": max(p["rate"] for p in phases),
                     "router_us": min(p["router_us"] for p in phases),
                     "redis_us": min(p["redis_us"] for p in phases)}
    return out


def memory_costs(redis_url: str) -> tuple[float, float]:
    """(bytes per trace in its stream, bytes per run-id key) measured with MEMORY USAGE."""
    client = redis.Redis.from_url(redis_url)
    try:
        stream_bytes, stream_len = 0, 0
        for key in client.scan_iter(match="rolegate:{*}:traces:*", count=1000):
            stream_bytes += int(client.memory_usage(key, samples=0) or 0)
            stream_len += int(client.xlen(key))
        run_keys = [key for key, _ in zip(client.scan_iter(match="rolegate:{*}:claims:*",
                                                           count=1000), range(200))]
        run_bytes = sum(int(client.memory_usage(key) or 0) for key in run_keys)
        return stream_bytes / max(stream_len, 1), run_bytes / max(len(run_keys), 1)
    finally:
        client.close()


def key_spread(cluster: OwnCluster) -> tuple[list[int], list[int]]:
    """(keys per master, roles per master) on the cluster."""
    per_role = []
    for index in range(len(cluster.ports)):
        node = cluster.node(index)
        try:
            per_role.append(len(node.keys("rolegate:{*}:binding")))
        finally:
            node.close()
    return cluster.keys_per_master(), per_role


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--roles", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    names = roles(args.roles)
    print(f"{args.roles} roles, {args.clients} clients, {args.seconds:g} s per phase, "
          f"batches of {args.batch}; cpus: {os.cpu_count()}", flush=True)
    with ExitStack() as stack:
        single = stack.enter_context(redis_server())
        cluster = started_cluster()
        stack.callback(cluster.close)
        cluster_urls = [f"redis://127.0.0.1:{port}" for port in cluster.ports]
        pool = stack.enter_context(multiprocessing.get_context("spawn").Pool(args.clients))
        rounds: dict[str, list[dict[str, dict[str, float]]]] = {}
        for _ in range(args.rounds):
            flush(single)
            rounds.setdefault("one", []).append(
                run_setup(pool, "one Redis, one router", single, [single], 1, args, names))
            stream_b, run_b = memory_costs(single)
            cluster.flush()
            rounds.setdefault("cluster", []).append(
                run_setup(pool, "Cluster, one router", cluster.url, cluster_urls, 1, args,
                          names))
            keys, per_role = key_spread(cluster)
            cluster.flush()
            rounds.setdefault("two", []).append(
                run_setup(pool, "Cluster, two routers", cluster.url, cluster_urls, 2, args,
                          names))
        one, on_cluster, two = (best(rounds[name]) for name in ("one", "cluster", "two"))
    print()
    for what in ("traces", "resolves"):
        print(f"{what:<9} Cluster / one Redis (one router): "
              f"{on_cluster[what]['rate'] / one[what]['rate']:.2f}x   "
              f"two routers / one (Cluster): {two[what]['rate'] / on_cluster[what]['rate']:.2f}x")
    total = sum(keys)
    print(f"keys per master: {keys} (max {max(keys) / max(total, 1):.0%} of {total}); "
          f"roles per master: {per_role} (max {max(per_role) / len(names):.0%})")
    print(f"memory: {stream_b:,.0f} bytes per trace in its stream, {run_b:,.0f} bytes per "
          "run-id key")
    print("per-operation costs for the sizing (one Redis, one router): "
          f"router {one['resolves']['router_us']:.1f} µs CPU per HTTP resolve, "
          f"{one['traces']['router_us']:.1f} µs per batched trace; Redis "
          f"{one['traces']['redis_us']:.1f} µs per trace (Cluster: "
          f"{on_cluster['traces']['redis_us']:.1f} µs summed over the masters)")


if __name__ == "__main__":
    main()
