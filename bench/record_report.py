"""What recording and reporting one run costs the agent, beside a hand-written baseline, in one run.

    .venv/bin/python bench/record_report.py [--runs 20000] [--tools 5]

Times, per run of `--tools` tool calls with small arguments and results:

- rolegate: `client.recorder(resolution)` as a `with` block, `run.tool(...)` per call,
  `run.output(...)`; leaving the block builds and validates the Trace and
  `report()` encodes it to JSON and queues it (what the agent's thread pays;
  sending happens on the client's own thread and is not in this number);
- baseline: `bench/record_baseline.py`, a separate minimal program that builds
  the same trace as a dict and `json.dumps` it into a list (what a caller
  writing trace JSON by hand would pay, with no validation).

The client starts from a bootstrap snapshot with nothing to send to (its sender
thread backs off quietly), so only the agent-side cost is measured. Prints the
mean µs per run of each, wall clock and CPU time of the measuring thread (on a
shared, loaded machine the CPU time is the steadier figure), and their ratio;
the target is at most 100 µs per run.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rolegate import Client  # noqa: E402

STAMPS = {"agent_version": "bench-1", "instruction_hash": "sha256:i", "model_id": "m",
          "tool_schema_hash": "sha256:t"}
BOOTSTRAP = {"generation": 1, "roles": {"bench": {
    "role": "bench", "version": 1,
    "binding": {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.1}}}}


def refused_url() -> str:
    """A loopback URL nothing listens on: the sender has nowhere to send."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def rolegate_runs(runs: int, tools: int) -> tuple[float, float]:
    """Mean (wall, CPU) seconds per recorded and reported run, on the agent's thread."""
    client = Client(refused_url(), "token", bootstrap=BOOTSTRAP, start_timeout=0,
                    stamps=STAMPS, max_queue=runs + 1, max_age=None)
    try:
        resolution = client.resolve("bench", "job-0")
        started, cpu = time.perf_counter(), time.thread_time()
        for n in range(runs):
            with client.recorder(resolution) as run:
                for call in range(tools):
                    run.tool("search", {"q": f"query {call}"}, result={"hits": [call, n]})
                run.output("an answer")
        elapsed, spent = time.perf_counter() - started, time.thread_time() - cpu
        assert client.report_stats().queued == runs
    finally:
        client.close(timeout=0)
    return elapsed / runs, spent / runs


def baseline_runs(runs: int, tools: int) -> tuple[float, float]:
    """Mean (wall, CPU) seconds per run of the hand-written baseline, in its own process."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "record_baseline.py"),
                           str(runs), str(tools)], capture_output=True, text=True, check=True)
    answer = json.loads(done.stdout)
    return float(answer["seconds_per_run"]), float(answer["cpu_seconds_per_run"])


def main() -> None:
    """Run both and print the per-run costs and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--tools", type=int, default=5)
    args = parser.parse_args()
    ours, ours_cpu = rolegate_runs(args.runs, args.tools)
    bare, bare_cpu = baseline_runs(args.runs, args.tools)
    print(f"runs: {args.runs}, tool calls per run: {args.tools}")
    print(f"{'':28s} {'wall µs':>9s} {'CPU µs':>9s}   per run")
    print(f"{'rolegate record + report':28s} {ours * 1e6:9.1f} {ours_cpu * 1e6:9.1f}")
    print(f"{'baseline dict + json.dumps':28s} {bare * 1e6:9.1f} {bare_cpu * 1e6:9.1f}")
    print(f"ratio (CPU): {ours_cpu / bare_cpu:.1f}x; target <= 100 µs per run (CPU): "
          f"{'met' if ours_cpu * 1e6 <= 100 else 'NOT met'}")


if __name__ == "__main__":
    main()
