"""What reading results by criterion costs, beside its baselines, in one run.

    .venv/bin/python bench/criteria_eval.py [--traces 20000] [--window 2000] [--repeats 15]

1. Pure: scoring one trace against the refunds example's 9 generated criteria
   (`gatekeeper.checks.criteria.evaluate`) against the online invariants' own check
   (`gatekeeper.checks.invariants.check`) on the same traces.
2. The gate view's by_criterion section (in-process, no HTTP) for a role in
   shadow with `--window` traces per arm: with specs registered for both
   configs (it re-reads and scores the newest traces) against no spec (it reads
   the aggregates the gate already has), and the whole gate view for scale.
   Uses its own redis-server on a free loopback port.

Prints microseconds per trace, milliseconds (median), and ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bindings.models import Binding, Invariants  # noqa: E402
from bindings.store import BindingStore  # noqa: E402
from gatekeeper.checks.criteria import evaluate, generate  # noqa: E402
from gatekeeper.checks.invariants import check  # noqa: E402
from gatekeeper.checks.spec import Spec  # noqa: E402
from gatekeeper.store.configs import ConfigStore  # noqa: E402
from gatekeeper.store.trace_keys import epoch_of  # noqa: E402
from gatekeeper.store.traces import Checked, TraceStore  # noqa: E402
from gatekeeper.view import gate_context, gate_view  # noqa: E402
from gatekeeper.view.criteria import criteria_section  # noqa: E402
from rolegate.trace import Trace  # noqa: E402

SPEC = Spec.model_validate(json.loads((ROOT / "examples/refunds/spec.json").read_text()))
INVARIANTS = Invariants(forbidden_tools=("web_write",), max_steps=6,
                        allowed_tools=("read_file", "lookupOrder", "verifyIdentity"))
STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}


def make_trace(i: int, arm: str, config: str) -> Trace:
    """A refunds trace; every third is over the escalation threshold."""
    amount = 2500.0 if i % 3 == 0 else 80.0
    tools = ["read_file", "lookupOrder"] + (["verifyIdentity"] if amount > 1000 else [])
    output = {"decision": "refund", "customer": {"id": f"c{i}"}, "amount": amount}
    return Trace(run_id=f"{arm}-{i}", role="refunds", config=config, arm=arm, key=f"job-{i}",
                 tools=tuple(tools), output_text=json.dumps(output), stamps=STAMPS,
                 input={"amount": amount, "order": f"o{i}"}, time=time.time())


def per_trace_us(fn: object, traces: list[Trace]) -> float:
    """Best of three passes, in microseconds per trace."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for t in traces:
            fn(t)  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best / len(traces) * 1e6


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of `fn()`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    """Run both comparisons and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    criteria = generate(SPEC)
    traces = [make_trace(i, "current", "cfg_a") for i in range(args.traces)]
    crit_us = per_trace_us(lambda t: evaluate(criteria, t), traces)
    inv_us = per_trace_us(lambda t: check(t, INVARIANTS), traces)
    print(f"pure, {args.traces} traces, {len(criteria)} criteria:")
    print(f"  criteria.evaluate  {crit_us:8.2f} us/trace")
    print(f"  invariants.check   {inv_us:8.2f} us/trace   (baseline)")
    print(f"  ratio              {crit_us / inv_us:8.2f} x")

    port = free_port()
    data = tempfile.mkdtemp(prefix="bench-criteria-")
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", data],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    connection = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                connection.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        bindings, store = BindingStore(connection), TraceStore(connection)
        binding = Binding(current="cfg_a", candidate="cfg_b", stage="shadow",
                          stage_since=time.time() - 60, gate={"invariants": INVARIANTS})
        bindings.write("refunds", binding, expected_version=0, actor="bench", action="create",
                       reason="bench")
        epoch = epoch_of(binding)
        for arm, config in (("current", "cfg_a"), ("shadow", "cfg_b")):
            batch = [make_trace(i, arm, config) for i in range(args.window)]
            for start in range(0, len(batch), 500):
                store.add([Checked(t, check(t, INVARIANTS), epoch)
                           for t in batch[start:start + 500]])
        configs = ConfigStore(connection)
        ctx = gate_context(bindings, store, "refunds", time.time())
        aggregates = median_ms(lambda: criteria_section(ctx, configs), args.repeats)
        whole = median_ms(lambda: gate_view(bindings, store, "refunds", time.time()),
                          args.repeats)
        configs.put("cfg_a", SPEC, actor="bench")
        configs.put("cfg_b", SPEC, actor="bench")
        scored = median_ms(lambda: criteria_section(ctx, configs), args.repeats)
        whole_spec = median_ms(lambda: gate_view(bindings, store, "refunds", time.time()),
                               args.repeats)
    finally:
        connection.close()
        server.terminate()
        server.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    print(f"by_criterion section, shadow, {args.window} traces per arm, median of "
          f"{args.repeats}:")
    print(f"  with specs (re-reads, scores newest)  {scored:8.1f} ms")
    print(f"  no spec (aggregates only)             {aggregates:8.1f} ms   (baseline)")
    print(f"  whole gate view without / with specs  {whole:8.1f} / {whole_spec:.1f} ms "
          f"(section share with specs {scored / whole_spec:.0%})")


if __name__ == "__main__":
    main()
