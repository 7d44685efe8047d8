"""In-process resolve (rolegate.client.Client) beside the HTTP resolve, in one run.

    .venv/bin/python bench/client_resolve.py [--calls 200000] [--http-calls 3000]

Starts its own redis-server and a gunicorn router on free loopback ports (it
touches no other Redis), puts a role on a 10% canary, then times, per call:

- the bare bucketing hash of each version, `rolegate.routing.bucketer` (the floor: every
  resolve pays one): version 1 BLAKE2b, version 2 XXH3 (issue 38 chose 2 by these numbers),
- `Client.resolve` on a role left on version 1 (unsalted) beside the version-2 role,
- the server's pure `rolegate.routing.resolve` (what each HTTP resolve computes),
- `Client.resolve` in-process (the client under test),
- `Client.resolve` with job attributes, the role carrying targeting rules that the
  attributes do not match (the slow path: the whole pure function, rules then hash),
- `GET /v1/resolve/<role>` over a keep-alive HTTP connection to gunicorn.

Per-call times come from perf_counter_ns around each call minus the median cost
of timing an empty call; the mean comes from an untimed tight loop. Prints
p50/p99/mean in microseconds and the ratios. The machine is shared: expect noise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import requests

from bindings.connection import RedisTarget, connect
from bindings.models import Binding, Stage
from bindings.store import BindingStore
from rolegate.client import Client
from rolegate.routing import bucketer, resolve

#: Job attributes no rule of the bench role matches.
ATTRIBUTES = {"tenant": "acme", "region": "us"}
OPERATOR = "bench-operator"
CALLER = "bench-caller"
ROLE = "summarizer"
#: The same rollout kept on bucketing version 1, unsalted (what rollouts before versions use).
ROLE_V1 = "summarizer-v1"


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_until(ready: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll `ready` until it holds or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come up within {timeout:g}s")
        time.sleep(0.05)


@contextmanager
def redis_server() -> Iterator[str]:
    """A private, diskless redis-server; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH")
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", workdir], stdout=subprocess.DEVNULL)
        try:
            wait_until(lambda: _answers(port), "redis-server")
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def gunicorn_router(redis_url: str) -> Iterator[str]:
    """The router under gunicorn (1 gthread worker, 4 threads); yields its URL."""
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_url,
               ROLEGATE_TOKENS=f"{OPERATOR}:operator,{CALLER}:caller")
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    process = subprocess.Popen(
        [gunicorn, "--bind", f"127.0.0.1:{port}", "--workers", "1", "--worker-class", "gthread",
         "--threads", "4", "--log-level", "warning", "router:create_app()"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url), "gunicorn")
        yield url
    finally:
        process.terminate()
        process.wait(15)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=0.5).status_code == 200
    except requests.RequestException:
        return False


def per_call_ns(call: Callable[[str], object], keys: list[str]) -> list[float]:
    """Time each call separately, less the median cost of timing an empty call."""
    clock = time.perf_counter_ns
    empty = []
    for _ in range(5_000):
        t0 = clock()
        empty.append(clock() - t0)
    overhead = statistics.median(empty)
    samples = []
    for key in keys:
        t0 = clock()
        call(key)
        samples.append(clock() - t0 - overhead)
    return samples


def mean_ns(call: Callable[[str], object], keys: list[str]) -> float:
    """Mean time per call over an untimed loop."""
    started = time.perf_counter_ns()
    for key in keys:
        call(key)
    return (time.perf_counter_ns() - started) / len(keys)


def interleaved(contenders: Mapping[str, Callable[[str], object]], keys: list[str],
                rounds: int = 10) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Time each contender in alternating rounds, so the shared machine's noise hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    totals = dict.fromkeys(contenders, 0.0)
    size = len(keys) // rounds
    for start in range(0, size * rounds, size):
        chunk = keys[start:start + size]
        for name, call in contenders.items():
            samples[name] += per_call_ns(call, chunk)
            totals[name] += mean_ns(call, chunk) * len(chunk)
    return samples, {name: total / (size * rounds) for name, total in totals.items()}


def summary(name: str, samples: list[float], mean: float) -> dict[str, float]:
    """p50/p99/mean in microseconds, printed as one row."""
    ordered = sorted(samples)
    p50 = ordered[len(ordered) // 2] / 1e3
    p99 = ordered[int(len(ordered) * 0.99)] / 1e3
    print(f"  {name:<34} p50 {p50:9.2f} µs   p99 {p99:9.2f} µs   mean {mean / 1e3:9.2f} µs"
          f"   n={len(samples)}")
    return {"p50": p50, "p99": p99, "mean": mean / 1e3}


def main() -> None:
    """Run the four measurements against one private router and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="in-process calls per figure")
    parser.add_argument("--http-calls", type=int, default=3_000, help="HTTP resolves")
    args = parser.parse_args()
    keys = [f"job-{n}" for n in range(args.calls)]
    with redis_server() as redis_url, gunicorn_router(redis_url) as url:
        admin = requests.Session()
        admin.headers["Authorization"] = f"Bearer {OPERATOR}"
        # Two targeting rules the timed attributes never match: the attribute path
        # pays for reading them and then buckets like everyone else.
        rules = [{"when": {"tenant": ["internal"]}, "arm": "candidate"},
                 {"when": {"region": ["eu"]}, "arm": "current"}]
        admin.put(f"{url}/v1/bindings/{ROLE}", json={"current": "cfg_a", "candidate": "cfg_b",
                                                     "rules": rules},
                  timeout=5).raise_for_status()
        admin.post(f"{url}/v1/bindings/{ROLE}/canary", json={"share": 0.1, "reason": "bench"},
                   timeout=5).raise_for_status()
        admin.close()
        # A rollout that predates bucketing versions: written to the store as an import is
        # (the API gives every new rollout version 2 and a salt).
        BindingStore(connect(RedisTarget(url=redis_url))).write(
            ROLE_V1, Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY, share=0.1),
            expected_version=0, actor="bench", action="create", reason="bench")
        record = requests.get(f"{url}/v1/bindings/{ROLE}", timeout=5,
                              headers={"Authorization": f"Bearer {CALLER}"}).json()
        binding, version = Binding.model_validate(record["binding"]), record["version"]

        with Client(url, CALLER, refresh_interval=1.0) as client:
            # Warm up: first calls pay for lazy imports and cache misses.
            hash_v1 = bucketer(ROLE, None, 1)
            hash_v2 = bucketer(ROLE, binding.salt, binding.bucket_version)
            for key in keys[:5_000]:
                client.resolve(ROLE, key)
                client.resolve(ROLE_V1, key)
                hash_v1(key)
                hash_v2(key)
            local = client.resolve
            contenders: dict[str, Callable[[str], object]] = {
                "hash": hash_v1,
                "hash2": hash_v2,
                "pure": lambda k: resolve(ROLE, binding, version, k),
                "client": lambda k: local(ROLE, k),
                "client1": lambda k: local(ROLE_V1, k),
                "targeted": lambda k: local(ROLE, k, ATTRIBUTES),
            }
            samples, means = interleaved(contenders, keys)
            rows = {}
            for name, label in (("hash", "hash v1 (BLAKE2b) alone"),
                                ("hash2", f"hash v{binding.bucket_version} (XXH3, salted) alone"),
                                ("client1", "Client.resolve() bucketing v1"),
                                ("pure", "routing.resolve() (server's)"),
                                ("client", "Client.resolve() in-process"),
                                ("targeted", "Client.resolve(attributes=) no match")):
                rows[name] = summary(label, samples[name], means[name])
            http = requests.Session()
            http.headers["Authorization"] = f"Bearer {CALLER}"
            http_keys = keys[: args.http_calls]

            def over_http(key: str) -> object:
                return http.get(f"{url}/v1/resolve/{ROLE}", params={"key": key}, timeout=5).json()

            for key in http_keys[:200]:
                over_http(key)
            mismatches = sum(1 for k in http_keys[:500] if over_http(k) != local(ROLE, k))
            rows["http"] = summary("GET /v1/resolve over HTTP", per_call_ns(over_http, http_keys),
                                   mean_ns(over_http, http_keys))
            http.close()
    client_p50 = rows["client"]["p50"]
    print(f"  in-process p50 vs target 2 µs: {'MET' if client_p50 <= 2.0 else 'MISSED'}"
          f" ({client_p50:.2f} µs)")
    print(f"  HTTP / in-process: p50 x{rows['http']['p50'] / client_p50:,.0f}, "
          f"p99 x{rows['http']['p99'] / rows['client']['p99']:,.0f}")
    print(f"  in-process - its hash alone (p50): {client_p50 - rows['hash2']['p50']:.2f} µs; "
          f"server's pure resolve / in-process (p50): x{rows['pure']['p50'] / client_p50:.2f}")
    print(f"  with attributes / without (p50): x{rows['targeted']['p50'] / client_p50:.2f}")
    print(f"  bucketing v2 / v1: hash p50 x{rows['hash2']['p50'] / rows['hash']['p50']:.2f}, "
          f"mean x{rows['hash2']['mean'] / rows['hash']['mean']:.2f}; Client.resolve p50 "
          f"x{client_p50 / rows['client1']['p50']:.2f}, "
          f"mean x{rows['client']['mean'] / rows['client1']['mean']:.2f}")
    print(f"  answers differing between HTTP and in-process on 500 keys: {mismatches}")


if __name__ == "__main__":
    main()
