"""Offline suite overhead: the suite's own cost per run, and the replay proxy's calls per second.

    python -m bench.suite_overhead [--runs 200] [--seconds 3]

1. A no-op agent (a shell that reads its request and prints `{}`) spawned
   directly, N times in a row, beside the same agent run N times through the
   suite (fresh workspace with a seed file, tool proxy attach, adapter, trace
   build, invariant checks). The difference per run is the suite's overhead
   (target: under 20 ms).
2. The replay proxy answering one recorded call over and over from one
   keep-alive client, beside a bare stdlib HTTP server answering the same JSON
   (the floor any loopback HTTP tool server sits on).

The machine is shared: figures are noisy, so each side runs in the same process
back to back, and the ratio matters more than the absolute numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gatekeeper.suite import adapter
from gatekeeper.suite.isolation import RunContext
from gatekeeper.suite.records import RunOptions
from gatekeeper.suite.replay import Fixture, FixtureReplay, RecordedCall, ToolProxy
from gatekeeper.suite.runner import SuiteRunner
from gatekeeper.suite.scenario import load_config, load_suite
from gatekeeper.suite.workspace import Workspace

NOOP_AGENT = "/bin/sh -c 'cat >/dev/null; echo {}'"


def _make_suite(root: Path, repeats: int) -> Path:
    (root / "scenarios").mkdir(parents=True)
    (root / "seed").mkdir()
    (root / "seed" / "input.md").write_text("# seed\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    scenario = {"id": "noop", "seed_files": {"input/input.md": "seed/input.md"}, "task": "nothing",
                "invariants": {"forbidden_tools": ["web_write"], "max_steps": 5},
                "repeats": repeats}
    (root / "scenarios" / "noop.json").write_text(json.dumps(scenario))
    tools = {"tools": {"lookup": {"kind": "static", "result": {"ok": True}}}}
    (root / "tools.json").write_text(json.dumps(tools))
    (root / "cfg.json").write_text(json.dumps({"name": "noop"}))
    return root


def bench_overhead(runs: int) -> dict[str, float]:
    """Per-run wall time: the agent spawned bare, then through the suite."""
    argv = adapter.split_command(NOOP_AGENT)
    payload = json.dumps({"task": "nothing"})
    with tempfile.TemporaryDirectory() as tmp:
        root = _make_suite(Path(tmp) / "suite", runs)
        # Warm both paths once so imports and page cache don't count.
        subprocess.run(argv, input=payload, capture_output=True, text=True, check=True)
        started = time.perf_counter()
        for _ in range(runs):
            subprocess.run(argv, input=payload, capture_output=True, text=True, check=True)
        bare = (time.perf_counter() - started) / runs
        suite = load_suite(root)
        config = load_config(root / "cfg.json")
        runner = SuiteRunner(suite, config, NOOP_AGENT, RunOptions(parallel=1), progress=None)
        started = time.perf_counter()
        result = runner.run()
        through = (time.perf_counter() - started) / runs
        assert len(result.records) == runs and all(r.passed for r in result.records)
    return {"bare_ms": bare * 1000, "suite_ms": through * 1000,
            "overhead_ms": (through - bare) * 1000}


class _Bare(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet."""

    def do_POST(self) -> None:  # noqa: N802
        """Answer a fixed JSON body."""
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = b'{"result": {"ok": true}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _hammer(host: str, port: int, path: str, seconds: float) -> float:
    connection = http.client.HTTPConnection(host, port, timeout=5)
    body = json.dumps({"q": "rates"})
    calls = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        connection.getresponse().read()
        calls += 1
    elapsed = time.perf_counter() - started
    connection.close()
    return calls / elapsed


def bench_proxy(seconds: float) -> dict[str, float]:
    """Calls per second: the replay proxy against a bare stdlib JSON server."""
    bare = ThreadingHTTPServer(("127.0.0.1", 0), _Bare)
    thread = threading.Thread(target=bare.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        bare_rate = _hammer("127.0.0.1", bare.server_address[1], "/tools/lookup", seconds)
    finally:
        bare.shutdown()
        thread.join()
        bare.server_close()

    with tempfile.TemporaryDirectory() as tmp:
        suite = load_suite(_make_suite(Path(tmp) / "suite", 1))
        calls = tuple(RecordedCall(tool="lookup", args={"q": "rates"}, result={"ok": True})
                      for _ in range(200_000))
        fixture = Fixture(scenario="noop", repeat=0, run_id="r", config="noop",
                          tool_schemas=suite.tools.schema_hashes(), calls=calls)
        with Workspace(suite, suite.scenarios[0]) as workspace, ToolProxy() as proxy:
            context = RunContext(run_id="bench", workspace=workspace, catalog=suite.tools,
                                 replay=FixtureReplay(fixture))
            proxy.attach(context)
            port = int(proxy.server.server_address[1])
            rate = _hammer("127.0.0.1", port, "/runs/bench/tools/lookup", seconds)
            assert not context.replay_misses
    return {"bare_calls_s": bare_rate, "proxy_calls_s": rate}


def main() -> None:
    """Run both benchmarks and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    over = bench_overhead(args.runs)
    print(f"no-op agent, {args.runs} runs, sequential:")
    print(f"  spawned directly      {over['bare_ms']:7.2f} ms/run")
    print(f"  through the suite     {over['suite_ms']:7.2f} ms/run "
          f"(x{over['suite_ms'] / over['bare_ms']:.2f})")
    verdict = "under" if over["overhead_ms"] < 20 else "OVER"
    print(f"  suite overhead        {over['overhead_ms']:7.2f} ms/run ({verdict} the 20 ms target)")
    proxy = bench_proxy(args.seconds)
    print(f"tool calls over one keep-alive connection, {args.seconds:g} s each:")
    print(f"  bare stdlib server    {proxy['bare_calls_s']:9.0f} calls/s")
    print(f"  replay proxy          {proxy['proxy_calls_s']:9.0f} calls/s "
          f"(x{proxy['proxy_calls_s'] / proxy['bare_calls_s']:.2f} of bare)")


if __name__ == "__main__":
    main()
