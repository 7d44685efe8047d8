"""Batched trace ingest against a bare Flask + Redis app, per trace, in one run (issue 38).

    python -m bench.ingest_batch [--seconds 5] [--connections 16] [--batch 100] [--rounds 2]

Starts its own redis-server and two gunicorn servers under deploy/gunicorn.conf.py
(2 workers each, on free loopback ports): the router, and the baseline
`bench.bare_apps:ingest_app()`, which parses the same JSON body and makes one
Redis round trip in which it LPUSHes each trace (no validation, no checks, no
gate bookkeeping). `--connections` keep-alive connections (threads of one
client process each) post `--batch`-trace bodies (every run id unique) for
`--seconds`, the two servers alternated `--rounds` times. The router is posted to as
the SDK does (`Prefer: return=minimal`: the compact answer) and, as `full`, without it
(one result per trace).

Prints, per server: traces/s, gunicorn-worker CPU per trace (from /proc: unlike
the rates it barely moves with what else loads the shared machine), the
answer's size, and timeouts (a request not answered within `--timeout` s, as
wrk counts them); then router / bare per trace. Beside the worker CPU, in brackets,
the redis-server's CPU per trace in the same phase (the router's scripts do its
bookkeeping there: work moved into a script is not work saved, and shows it). Target (issue 38): <= 2.0x, and
no timeout where the bare app has none.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_resolve import redis_server
from bench.ingest import (
    CALLER,
    GATE,
    OPERATOR,
    ROLE,
    gunicorn_router,
    trace_template,
    worker_cpu_s,
)

HEADERS = {"Authorization": f"Bearer {CALLER}", "Content-Type": "application/json"}
#: What the SDK's reporter sends: the compact answer (counts, refused and tripping traces).
MINIMAL = {**HEADERS, "Prefer": "return=minimal"}


def batch_body(size: int) -> str:
    """A batch of `size` traces (candidate and current, like a canary) with RUNID to fill in."""
    traces = []
    for i in range(size):
        arm = "candidate" if i % 10 == 0 else "current"
        body = json.dumps(trace_template(arm, 3 + i % 3))
        traces.append(body.replace("RUNID", f"RUNID-{i}"))
    return '{"traces": [' + ",".join(traces) + "]}"


def load(port: int, template: str, connections: int, seconds: float,
         timeout: float, headers: dict[str, str] = HEADERS) -> tuple[int, int, int, int]:
    """(requests answered 200, timeouts, other failures, answer bytes) over `seconds`."""
    stop = time.monotonic() + seconds
    counts = {"ok": 0, "timeouts": 0, "failed": 0, "bytes": 0}
    lock = threading.Lock()
    stamp = time.time()

    def one(worker: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        done = 0
        while time.monotonic() < stop:
            body = template.replace("RUNID", f"w{worker}-{stamp}-{done}")
            done += 1
            try:
                connection.request("POST", "/v1/traces", body=body, headers=headers)
                response = connection.getresponse()
                answer = response.read()
                outcome = "ok" if response.status == 200 else "failed"
            except TimeoutError:
                outcome = "timeouts"
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                answer = b""
            except (OSError, http.client.HTTPException):
                outcome = "failed"
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                answer = b""
            with lock:
                counts[outcome] += 1
                counts["bytes"] = max(counts["bytes"], len(answer))
        connection.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts["ok"], counts["timeouts"], counts["failed"], counts["bytes"]


def redis_pid(url: str) -> int:
    """The pid of the redis-server listening on `url`'s port (0 if not found)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    for entry in Path("/proc").iterdir():
        try:
            # Redis rewrites its title: "/usr/bin/redis-server 127.0.0.1:PORT".
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].split()
        except OSError:
            continue
        if (len(title) == 2 and title[0].endswith(b"redis-server")
                and title[1].endswith(f":{port}".encode())):
            return int(entry.name)
    return 0


def process_cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used so far (Linux /proc; 0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def phase(port: int, master: int, template: str, batch: int, args: argparse.Namespace,
          headers: dict[str, str] = HEADERS, redis: int = 0) -> dict[str, float]:
    """One timed phase against one server: traces/s, CPU µs per trace, timeouts, failures."""
    cpu0, wall0, redis0 = worker_cpu_s(master), time.monotonic(), process_cpu_s(redis)
    ok, timeouts, failed, size = load(port, template, args.connections, args.seconds,
                                      args.timeout, headers)
    cpu, wall = worker_cpu_s(master) - cpu0, time.monotonic() - wall0
    traces = ok * batch
    return {"rate": traces / wall, "cpu_us": cpu / max(traces, 1) * 1e6,
            "redis_us": (process_cpu_s(redis) - redis0) / max(traces, 1) * 1e6,
            "timeouts": timeouts, "failed": failed, "bytes": size}


def main() -> None:
    """Alternate router and bare app under the same load; print per-trace CPU and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds (wrk's default)")
    args = parser.parse_args()
    template = batch_body(args.batch)
    with redis_server() as redis_url, gunicorn_router(redis_url) as (url, master), \
            gunicorn_router(redis_url, "bench.bare_apps:ingest_app()") as (bare_url, bare):
        op = {"Authorization": f"Bearer {OPERATOR}"}
        requests.put(f"{url}/v1/bindings/{ROLE}", headers=op, timeout=10, json={
            "current": "cfg_a", "candidate": "cfg_b", "gate": GATE}).raise_for_status()
        requests.post(f"{url}/v1/bindings/{ROLE}/canary", headers=op, timeout=10,
                      json={"share": 0.1, "reason": "bench"}).raise_for_status()
        time.sleep(0.5)  # every worker's binding copy sees the canary
        port, bare_port = (int(u.rsplit(":", 1)[1]) for u in (url, bare_url))
        print(f"batched ingest: {args.batch} traces per POST, {args.connections} connections, "
              f"{args.seconds:g} s per phase, {args.rounds} alternating rounds, 2 gunicorn "
              f"workers each, timeout {args.timeout:g} s")
        runs: dict[str, list[dict[str, float]]] = {"bare": [], "rolegate": [], "full": []}
        store = redis_pid(redis_url)
        for _ in range(args.rounds):
            runs["bare"].append(phase(bare_port, bare, template, args.batch, args, redis=store))
            runs["rolegate"].append(phase(port, master, template, args.batch, args, MINIMAL,
                                          store))
            runs["full"].append(phase(port, master, template, args.batch, args, redis=store))
        cpu = {}
        for name, phases in runs.items():
            cpu[name] = statistics.mean(p["cpu_us"] for p in phases)
            print(f"  {name:<9} {statistics.mean(p['rate'] for p in phases):9,.0f} traces/s   "
                  f"worker CPU {cpu[name]:6.1f} µs/trace   "
                  f"(redis {statistics.mean(p['redis_us'] for p in phases):5.1f})   "
                  f"answer {phases[-1]['bytes']:,.0f} B   "
                  f"timeouts {sum(p['timeouts'] for p in phases):.0f}   "
                  f"failed {sum(p['failed'] for p in phases):.0f}")
        print(f"  rolegate / bare, CPU per trace: {cpu['rolegate'] / cpu['bare']:.2f}x "
              f"(target <= 2.0); with the full per-trace answer {cpu['full'] / cpu['bare']:.2f}x")
        # Each round's own ratios: the spread says how far the mean can be trusted.
        for name in ("rolegate", "full"):
            ratios = " ".join(f"{p['cpu_us'] / b['cpu_us']:.2f}"
                              for p, b in zip(runs[name], runs["bare"]))
            print(f"    per round, {name:<8} / bare: {ratios}")
        print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
