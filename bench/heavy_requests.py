"""How long the heaviest requests hold a worker: the longest a resolve waits meanwhile.

    python -m bench.heavy_requests [--runs 100000] [--thresholds 50] [--batch 10000]

Under gevent workers (deploy/gunicorn.conf.py) a request that computes holds
every other request of its worker. This runs the router with ONE worker on its
own redis-server, stores `--runs` traces, then sends each heavy request while
one keep-alive client resolves in a loop on the same worker, and prints how
long the heavy request took, how many resolves were answered meanwhile and the
longest a resolve waited (target: under a second):

1. `GET /v1/roles/<role>/drift/calibrate` over `--runs` runs with `--thresholds` h values;
2. `POST /v1/traces` with one `--batch`-trace batch;
3. `GET /v1/roles/<role>/golden` and `GET /v1/roles/<role>/gate` with `--runs` stored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

import requests

from bench.load import gunicorn_app
from bench.resolve import TOKEN, private_redis, router_env
from bench.serving_load import OPERATOR, trace

ROLE = "heavy"
CHUNK = 2_000


def held(base: str, send: Any) -> tuple[int, float, int, float]:
    """Run `send()` in a thread while resolving on one connection: (status, s, resolves, max wait)."""
    done = threading.Event()
    outcome: list[tuple[int, float]] = []

    def heavy() -> None:
        began = time.perf_counter()
        try:
            outcome.append((send().status_code, time.perf_counter() - began))
        finally:
            done.set()

    session = requests.Session()
    caller = {"Authorization": f"Bearer {TOKEN}"}
    session.get(f"{base}/v1/resolve/{ROLE}?key=warm", headers=caller, timeout=30)
    waits: list[float] = []
    worker = threading.Thread(target=heavy)
    worker.start()
    while not done.is_set():
        began = time.perf_counter()
        session.get(f"{base}/v1/resolve/{ROLE}?key=k", headers=caller,
                    timeout=60).raise_for_status()
        waits.append(time.perf_counter() - began)
    worker.join()
    status, took = outcome[0] if outcome else (0, 0.0)
    return status, took, len(waits), max(waits, default=0.0)


def main(argv: list[str] | None = None) -> int:
    """Store the runs, send each heavy request, print the waits."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--thresholds", type=int, default=50)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args(argv)
    with private_redis() as (url, data_dir):
        env = router_env(url, data_dir)
        env["ROLEGATE_TOKENS"] += f",op={OPERATOR}:operator"
        with gunicorn_app("router:create_app()", env, 1,
                          os.path.join(data_dir, "router.log")) as (port, _master):
            base = f"http://127.0.0.1:{port}"
            operator = {"Authorization": f"Bearer {OPERATOR}"}
            caller = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            requests.put(f"{base}/v1/bindings/{ROLE}", headers=operator, timeout=30,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1}).raise_for_status()
            for start in range(0, args.runs, CHUNK):
                batch = [{**trace(f"r{i}", i), "role": ROLE}
                         for i in range(start, min(args.runs, start + CHUNK))]
                requests.post(f"{base}/v1/traces", data=json.dumps(batch), headers=caller,
                              timeout=120).raise_for_status()
            hs = "&".join(f"h={3 + i * 0.5:g}" for i in range(args.thresholds))
            big = json.dumps([{**trace(f"b{i}", i), "role": ROLE} for i in range(args.batch)])
            heavy = {
                f"calibrate, {args.runs:,} runs x {args.thresholds} h": lambda: requests.get(
                    f"{base}/v1/roles/{ROLE}/drift/calibrate?runs={args.runs}&{hs}",
                    headers=operator, timeout=300),
                f"POST one {args.batch:,}-trace batch": lambda: requests.post(
                    f"{base}/v1/traces", data=big, headers=caller, timeout=300),
                "GET golden": lambda: requests.get(f"{base}/v1/roles/{ROLE}/golden",
                                                   headers=operator, timeout=300),
                "GET gate": lambda: requests.get(f"{base}/v1/roles/{ROLE}/gate",
                                                 headers=operator, timeout=300),
            }
            print(f"heavy requests on one gevent worker, {args.runs:,} runs stored, "
                  f"cpus={os.cpu_count()} (shared)")
            print(f"  {'request':42} {'status':>6} {'took s':>7} {'resolves':>9} "
                  f"{'longest wait ms':>16}")
            worst = 0.0
            for name, send in heavy.items():
                status, took, count, longest = held(base, send)
                worst = max(worst, longest)
                print(f"  {name:42} {status:>6} {took:7.2f} {count:>9} {longest * 1000:16.1f}")
            print(f"  longest a resolve waited: {worst * 1000:.0f} ms "
                  f"({'meets' if worst < 1.0 else 'misses'} the 1 s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
