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
mean µs per run of each and their ratio; the target is at most 100 µs per run.
The machine is shared: expect noise.
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


def rolegate_runs(runs: int, tools: int) -> float:
    """Mean seconds per recorded and reported run."""
    client = Client(refused_url(), "token", bootstrap=BOOTSTRAP, start_timeout=0,
                    stamps=STAMPS, max_queue=runs + 1, max_age=None)
    try:
        resolution = client.resolve("bench", "job-0")
        started = time.perf_counter()
        for n in range(runs):
            with client.recorder(resolution) as run:
                for call in range(tools):
                    run.tool("search", {"q": f"query {call}"}, result={"hits": [call, n]})
                run.output("an answer")
        elapsed = time.perf_counter() - started
        assert client.report_stats().queued == runs
    finally:
        client.close(timeout=0)
    return elapsed / runs


def baseline_runs(runs: int, tools: int) -> float:
    """Mean seconds per run of the hand-written baseline, in its own process."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "record_baseline.py"),
                           str(runs), str(tools)], capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["seconds_per_run"])


def main() -> None:
    """Run both and print the per-run costs and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--tools", type=int, default=5)
    args = parser.parse_args()
    ours = rolegate_runs(args.runs, args.tools)
    bare = baseline_runs(args.runs, args.tools)
    print(f"runs: {args.runs}, tool calls per run: {args.tools}")
    print(f"rolegate record + report: {ours * 1e6:8.1f} µs per run")
    print(f"baseline dict + json.dumps: {bare * 1e6:6.1f} µs per run")
    print(f"ratio: {ours / bare:.1f}x; target <= 100 µs per run: "
          f"{'met' if ours * 1e6 <= 100 else 'NOT met'}")


if __name__ == "__main__":
    main()
