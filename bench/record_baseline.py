"""The baseline for bench/record_report.py: a trace built by hand as a dict and JSON-encoded.

    python bench/record_baseline.py RUNS TOOLS

No rolegate import: this is what a caller writing trace JSON by hand pays per
run (no validation, no derived fields). Prints {"seconds_per_run", "cpu_seconds_per_run"}.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

STAMPS = {"agent_version": "bench-1", "instruction_hash": "sha256:i", "model_id": "m",
          "tool_schema_hash": "sha256:t"}


def main() -> None:
    """Build and encode RUNS traces of TOOLS calls each; print the mean seconds per run."""
    runs, tools = int(sys.argv[1]), int(sys.argv[2])
    queue: list[str] = []
    started, cpu = time.perf_counter(), time.thread_time()
    for n in range(runs):
        t0 = time.monotonic()
        steps = [{"tool": "search", "args": {"q": f"query {call}"},
                  "result": {"hits": [call, n]}} for call in range(tools)]
        queue.append(json.dumps({
            "run_id": uuid.uuid4().hex, "role": "bench", "config": "cfg-a", "arm": "current",
            "key": "job-0", "steps": steps, "output_text": "an answer", "answered": True,
            "latency_s": time.monotonic() - t0, "stamps": STAMPS, "time": time.time()}))
    elapsed, spent = time.perf_counter() - started, time.thread_time() - cpu
    print(json.dumps({"seconds_per_run": elapsed / runs, "cpu_seconds_per_run": spent / runs,
                      "queued": len(queue)}))


if __name__ == "__main__":
    main()
