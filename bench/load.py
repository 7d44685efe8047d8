"""Load generation and server plumbing shared by the HTTP benches.

`wrk` (Debian's package) drives the load when it is on PATH: it is written in C
and takes far less of this 2-core machine than the server it measures. Without
it a Python keep-alive generator (client processes x threads) stands in, and
the report says which one ran. Both send the same requests to the thing and to
its baseline, so the ratio compares like with like either way.

`gunicorn_app` starts any WSGI app factory under deploy/gunicorn.conf.py, the
router or a bare baseline alike: same workers, threads and keep-alive.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "gunicorn.conf.py"

#: wrk script: the same header set for every request, paths cycling over KEYS job keys,
#: and a JSON summary line at the end (latencies in microseconds).
_WRK_SCRIPT = """
local headers = %(headers)s
local paths = %(paths)s
local body = %(body)s
local method = "%(method)s"
local i = 0
-- Run ids unique across rounds (the round's tag) and threads (each thread's
-- number): every wrk thread starts from the same random seed, so a random part
-- alone repeated itself, and every repeat was a duplicate, not an ingest.
-- A global: thread:set gives each thread's own state its value.
tag = "%(tag)s"
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("tag", "%(tag)s-" .. threads)
end
for name, value in pairs(headers) do wrk.headers[name] = value end
request = function()
  i = i + 1
  local b = body
  if b ~= nil then b = string.gsub(b, "RUNID", tag .. "-" .. tostring(i)) end
  return wrk.format(method, paths[(i %% #paths) + 1], nil, b)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%%d,"errors":%%d,"p50":%%d,"p99":%%d,"us":%%d}\\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
"""


@dataclass
class Sample:
    """One measured round: requests done, errors, seconds, p50/p99 latency (s), server CPU (s)."""

    requests: int
    errors: int
    seconds: float
    p50: float
    p99: float
    cpu: float = 0.0


def _lua(value: object) -> str:
    if value is None:
        return "nil"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string literal is a valid Lua string literal here
    if isinstance(value, list):
        return "{" + ", ".join(_lua(v) for v in value) + "}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def have_wrk() -> bool:
    """True when wrk is on PATH."""
    return shutil.which("wrk") is not None


def run_wrk(port: int, paths: list[str], headers: Mapping[str, str], seconds: float,
            connections: int, threads: int = 2, method: str = "GET",
            body: str | None = None) -> Sample:
    """One wrk round against 127.0.0.1:`port`; `body` may hold RUNID, made unique per request."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_WRK_SCRIPT % {"headers": _lua(dict(headers)), "paths": _lua(paths),
                                    "body": _lua(body), "method": method,
                                    "tag": uuid.uuid4().hex[:12]})
    try:
        out = subprocess.run(
            ["wrk", "-t", str(threads), "-c", str(max(connections, threads)),
             "-d", f"{max(1, round(seconds))}s", "--timeout", "10s", "-s", script.name,
             f"http://127.0.0.1:{port}"], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    line = next(x for x in out.splitlines() if x.startswith("WRKJSON "))
    data = json.loads(line.split(" ", 1)[1])
    return Sample(data["requests"], data["errors"], data["us"] / 1e6, data["p50"] / 1e6,
                  data["p99"] / 1e6)


# -- the Python stand-in ---------------------------------------------------------


def _client_thread(port: int, paths: list[str], headers: dict[str, str], method: str,
                   body: str | None, deadline: float, latencies: array[float],
                   errors: list[int], tag: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    i = 0
    try:
        while True:
            now = time.perf_counter()
            if now >= deadline:
                return
            payload = body.replace("RUNID", f"{tag}-{i}") if body is not None else None
            conn.request(method, paths[i % len(paths)], body=payload, headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append(time.perf_counter() - now)
            if not 200 <= response.status < 300:
                errors[0] += 1
            if response.will_close:
                conn.close()
            i += 1
    except OSError:
        errors[0] += 1
    finally:
        conn.close()


def _client_process(port: int, paths: list[str], headers: dict[str, str], method: str,
                    body: str | None, start: float, seconds: float, threads: int,
                    tag: str, out: Connection) -> None:
    while time.time() < start:
        time.sleep(0.001)
    deadline = time.perf_counter() + seconds
    per_thread = [array("d") for _ in range(threads)]
    errors = [0]
    workers = [threading.Thread(target=_client_thread,
                                args=(port, paths, headers, method, body, deadline, lat,
                                      errors, f"{tag}-{n}"))
               for n, lat in enumerate(per_thread)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    merged = array("d")
    for lat in per_thread:
        merged.extend(lat)
    out.send((merged.tobytes(), errors[0]))
    out.close()


def run_python(port: int, paths: list[str], headers: Mapping[str, str], seconds: float,
               connections: int, processes: int = 2, method: str = "GET",
               body: str | None = None) -> Sample:
    """One round of the Python generator: `connections` keep-alive clients over `processes`."""
    ctx = multiprocessing.get_context("fork")
    start = time.time() + 0.2
    threads = max(1, connections // processes)
    pipes, procs = [], []
    for n in range(processes):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client_process,
                           args=(port, paths, dict(headers), method, body, start, seconds,
                                 threads, f"p{n}-{start}", send))
        proc.start()
        send.close()
        pipes.append(receive)
        procs.append(proc)
    latencies = array("d")
    errors = 0
    for receive, proc in zip(pipes, procs):
        raw, errs = receive.recv()
        receive.close()
        proc.join()
        chunk = array("d")
        chunk.frombytes(raw)
        latencies.extend(chunk)
        errors += errs
    ordered = sorted(latencies)
    return Sample(len(ordered), errors, seconds, percentile(ordered, 50), percentile(ordered, 99))


def drive(port: int, paths: list[str], headers: Mapping[str, str], seconds: float,
          connections: int = 8, method: str = "GET", body: str | None = None,
          master: int = 0, use_wrk: bool | None = None) -> Sample:
    """One round with wrk when available (else Python), with the server's CPU if `master`."""
    before = worker_cpu_s(master) if master else 0.0
    if use_wrk if use_wrk is not None else have_wrk():
        sample = run_wrk(port, paths, headers, seconds, connections, method=method, body=body)
    else:
        sample = run_python(port, paths, headers, seconds, connections, method=method, body=body)
    if master:
        sample.cpu = worker_cpu_s(master) - before
    return sample


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def worker_cpu_s(master: int) -> float:
    """CPU seconds (user + system) used so far by the children of `master` (Linux /proc).

    On a machine shared with other work, CPU per request is a steadier measure
    of what an endpoint costs than req/s, which moves with everyone's load.
    """
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == master:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


# -- servers -------------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ready(port: int, path: str = "/healthz") -> bool:
    """True when GET `path` answers 200 on 127.0.0.1:`port`."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        finally:
            conn.close()
    except OSError:
        return False


@contextmanager
def gunicorn_app(factory: str, env: Mapping[str, str], workers: int,
                 log_path: str | None = None,
                 root: Path = ROOT) -> Iterator[tuple[int, int]]:
    """gunicorn with deploy/gunicorn.conf.py serving `factory`; yields (port, master pid).

    The server's stderr (the router's JSON lines) goes to `log_path`, a real file
    as in production, or to /dev/null. `root` is the checkout it serves (its
    deploy/gunicorn.conf.py and its code first on the path): another commit's
    tree serves that commit's router (bench.against_base).
    """
    port = free_port()
    full = {**os.environ, **env}
    full.pop("ROLEGATE_ACCESS_LOG", None)
    if root != ROOT:
        full["PYTHONPATH"] = str(root)
    argv = [sys.executable, "-m", "gunicorn", "--config", str(root / "deploy" / CONFIG.name),
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), factory]
    sink = open(log_path or os.devnull, "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, env=full, cwd=root, stdout=subprocess.DEVNULL, stderr=sink,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not ready(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"gunicorn ({factory}) did not start")
            time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        finally:
            sink.close()
