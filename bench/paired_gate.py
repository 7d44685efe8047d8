"""The gate view in the SHADOW stage over a large window: the paired section replayed vs kept.

    .venv/bin/python -m bench.paired_gate [--runs 50000] [--batch 500] [--rounds 10]

Starts its own diskless redis-server on a free loopback port (touches no other
Redis), writes a shadow-stage binding and stores `--runs` traces per arm
in-process (TraceStore.add, untimed): every job runs on both arms, half of the
shadow runs arrive before their current run, and 1 job in 20 runs on current
only (it waits for a mate that never comes). Then it times, in-process (no HTTP),
`gatekeeper.view.gate_view` (every section):

1. cold: the kept pairing tally and drift detectors catch up from the stage's
   first run (at most 5,000 entries per arm per read);
2. before: the whole view with the paired section replayed from the streams as
   it was built before this change (up to 20,000 runs per arm per read), the
   drift detectors already caught up, so only the paired section differs;
3. after, caught up, no new runs;
4. after, with `--batch` new runs per arm stored (untimed) before each read.

It also times the paired section alone: replayed over at most 20,000 runs per
arm (before), replayed over every run of the stage (what the kept tally covers)
and kept, and checks that the kept tally's report equals the one-shot pairing
of every run. Target (issue 3): the gate view under 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_resolve import redis_server  # noqa: E402
from bindings.models import Binding, GatePolicy, Stage  # noqa: E402
from bindings.store import BindingStore  # noqa: E402
from gatekeeper.checks.invariants import check  # noqa: E402
from gatekeeper.stats.pairing import compare, pair_runs  # noqa: E402
from gatekeeper.store.drift_state import DRIFT_KEY_TEMPLATE  # noqa: E402
from gatekeeper.store.paired_state import PAIRED_KEY_TEMPLATE  # noqa: E402
from gatekeeper.store.trace_keys import epoch_of  # noqa: E402
from gatekeeper.store.traces import Checked, TraceStore  # noqa: E402
from gatekeeper.view_model import GateView  # noqa: E402
from rolegate.trace import Trace  # noqa: E402

ROLE = "summarizer"
GATE: dict[str, Any] = {
    "thresholds": {"min_samples": 50, "min_pass_rate": 0.9, "p95_step_ceiling": 12,
                   "max_mean_cost_usd": 0.04},
    "invariants": {"artifact_exists": ["output/result.md"], "must_contain_table": True,
                   "forbidden_tools": ["web_write", "external_egress"],
                   "required_tools": ["search"], "max_steps": 12, "max_cost_usd": 0.04}}
OUTPUT = ("Summary of the quarter.\n\n| region | revenue | growth |\n|---|---:|---:|\n"
          "| north | 1200 | 4% |\n| south | 900 | -1% |\n")
TOOLS = ["read_file", "search", "read_file", "summarize", "write_file"]
STAMPS = {"agent_version": "2026.07.06", "instruction_hash": "sha256:9f2c",
          "model_id": "model-x", "tool_schema_hash": "sha256:11ab"}
#: Runs per TraceStore.add call while filling.
CHUNK = 1_000


class Fill:
    """Stores jobs' runs on both arms in the bench's arrival pattern, job after job."""

    def __init__(self, connection: redis.Redis, binding: Binding) -> None:
        # Streams kept whole (not capped at the 100,000 default): the one-shot pairing
        # the kept tally is checked against replays every run of the stage.
        self.store = TraceStore(connection, retention=10 ** 7)
        self.binding = binding
        self.epoch = epoch_of(binding)
        self.next_job = 0

    def trace(self, arm: str, job: int) -> Trace:
        """The run of `job` on `arm`: shadow fails a few more jobs, now and then drops a call."""
        solo = job % 20 == 7
        fails = job % 25 == 0 or (arm == "shadow" and job % 40 == 3)
        tools = TOOLS[:3 + job % 3]
        if arm == "shadow" and job % 500 == 11:
            tools = ["read_file", "summarize"]  # lost the required "search"
        config = self.binding.current if arm == "current" else self.binding.candidate
        return Trace.model_validate({
            "run_id": f"{arm}-{job}", "role": ROLE, "config": config, "arm": arm,
            "key": f"{'solo' if solo else 'job'}-{job}", "tools": tools, "tool_errors": 0,
            "answered": True, "cost_usd": 0.0123, "tokens": 1840, "latency_s": 4.2,
            "artifacts": [] if fails else ["output/result.md"], "output_text": OUTPUT,
            "stamps": STAMPS})

    def add(self, runs_per_arm: int) -> None:
        """Store `runs_per_arm` more runs per arm: shadow of half the jobs ahead of current."""
        invariants = self.binding.gate.invariants
        for low in range(self.next_job, self.next_job + runs_per_arm, CHUNK):
            high = min(low + CHUNK, self.next_job + runs_per_arm)
            half = (low + high) // 2
            # Shadow runs of the chunk's second half arrive before their current runs;
            # those of its first half after them. Solo jobs never run on shadow.
            order = [("shadow", j) for j in range(half, high)] + \
                [("current", j) for j in range(low, high)] + \
                [("shadow", j) for j in range(low, half)]
            batch = [self.trace(arm, j) for arm, j in order if arm == "current" or j % 20 != 7]
            self.store.add([Checked(t, check(t, invariants), self.epoch) for t in batch])
        self.next_job += runs_per_arm


def replayed_paired(ctx: Any, count: int = 20_000) -> dict[str, Any] | None:
    """The paired section as it was built before: both arms replayed from the streams."""
    from gatekeeper.stats.budget import final_alpha
    from gatekeeper.view.sections import since

    binding = ctx.record.binding
    if binding.stage is not Stage.SHADOW or binding.candidate is None:
        return None
    current = since(ctx.traces, ctx.role, binding.current, "current", binding.stage_since, count)
    shadow = since(ctx.traces, ctx.role, binding.candidate, "shadow", binding.stage_since, count)
    thresholds = binding.gate.thresholds
    # The view's exact McNemar look runs at its share of the stage alpha.
    return compare(pair_runs(current, shadow), alpha=final_alpha(thresholds.alpha, Stage.SHADOW),
                   min_samples=thresholds.min_samples,
                   required_tools=binding.gate.invariants.required_tools).as_dict()


class Timings(list[float]):
    """Wall seconds per call, with this process's CPU seconds per call beside them (`cpu`)."""

    def __init__(self) -> None:
        super().__init__()
        self.cpu: list[float] = []


def timed(call: Callable[[], Any], rounds: int,
          between: Callable[[], None] | None = None) -> tuple[Timings, Any]:
    """Seconds per call over `rounds` calls (`between()` untimed before each); the last answer."""
    spent, answer = Timings(), None
    for _ in range(rounds):
        if between is not None:
            between()
        started, cpu = time.perf_counter(), time.process_time()
        answer = call()
        spent.cpu.append(time.process_time() - cpu)
        spent.append(time.perf_counter() - started)
    return spent, answer


def _ms(timings: Timings) -> str:
    # CPU time beside wall: the machine is shared, and the gap is time spent waiting
    # (for a core, or for Redis).
    return (f"median {statistics.median(timings) * 1e3:7.1f} ms, max {max(timings) * 1e3:7.1f} ms"
            f" (CPU median {statistics.median(timings.cpu) * 1e3:.1f} ms)")


def _median(timings: list[float]) -> float:
    return statistics.median(timings)


def _forget(connection: redis.Redis, template: str, **names: str) -> None:
    """Delete every key matching a state key template (the cold start)."""
    pattern = template.format(**names)
    stale = [key for key in connection.scan_iter(match=pattern + "*", count=1000)]
    if stale:
        connection.delete(*stale)


def run(runs: int, batch: int, rounds: int) -> None:
    """Fill one shadow stage, then time the gate view and the paired section both ways."""
    from gatekeeper.view import build as api_gate
    from gatekeeper.view import context as gate_ctx
    from gatekeeper.view.sections import paired_section

    with redis_server() as url:
        connection = redis.Redis.from_url(url)
        store = BindingStore(connection)
        binding = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.SHADOW,
                          stage_since=time.time() - 1.0, gate=GatePolicy.model_validate(GATE))
        store.write(ROLE, binding, expected_version=0, actor="bench", action="create",
                    reason="bench")
        traces = TraceStore(connection)
        fill = Fill(connection, binding)
        started = time.perf_counter()
        fill.add(runs)
        print(f"paired gate bench: {runs:,} jobs stored per arm in "
              f"{time.perf_counter() - started:.1f} s (untimed); shadow stage, "
              f"1 job in 20 on current only")

        def view() -> GateView:
            return api_gate.gate_view(store, traces, ROLE, time.time())

        def ctx() -> Any:
            return gate_ctx.gate_context(store, traces, ROLE, time.time())

        for template in (PAIRED_KEY_TEMPLATE, DRIFT_KEY_TEMPLATE):
            _forget(connection, template.split("{epoch}")[0], role=ROLE, current="*",
                    candidate="*", config="*", arm="*")
        cold = Timings()
        answer: GateView | None = None
        while not (answer is not None and answer.paired is not None and answer.paired.caught_up
                   and getattr(answer.drift, "caught_up", True)) and len(cold) < 200:
            spent, answer = timed(view, 1)
            cold += spent
            cold.cpu += spent.cpu
        print(f"  cold catch-up (paired tally + drift detectors, <= 5,000 runs per arm per "
              f"read): {len(cold)} reads, first {cold[0] * 1e3:.1f} ms, {_ms(cold)}")

        with swapped(api_gate, "paired_section", replayed_paired):
            before, old = timed(view, rounds)
        idle, new = timed(view, rounds)
        print(f"  gate_view, paired replayed (before, <= 20,000 runs per arm):        "
              f"{_ms(before)}   pairs={0 if old.paired is None else old.paired.pairs:,}")
        print(f"  gate_view, paired kept, caught up, no new runs:                    "
              f"{_ms(idle)}   pairs={0 if new.paired is None else new.paired.pairs:,}")
        fresh, new = timed(view, rounds, lambda: fill.add(batch))
        print(f"  gate_view, paired kept, {batch} new jobs per arm stored before each read: "
              f"{_ms(fresh)}   pairs={0 if new.paired is None else new.paired.pairs:,}, "
              f"caught_up={new.paired is not None and new.paired.caught_up}   (target < 500 ms)")

        capped, _ = timed(lambda: replayed_paired(ctx()), rounds)
        total = traces.length(ROLE, "cfg_a", "current")
        full, one_shot = timed(lambda: replayed_paired(ctx(), total + 1), max(3, rounds // 3))
        kept, section = timed(lambda: paired_section(ctx()), rounds)
        assert section is not None and one_shot is not None
        same = {k: section[k] for k in one_shot} == one_shot
        print(f"  paired section alone: replayed <= 20,000/arm {_ms(capped)}; replayed all "
              f"{total:,}/arm {_ms(full)}; kept {_ms(kept)}")
        print(f"  kept report == one-shot pairing of all {total:,} runs per arm: {same} "
              f"(pairs {section['pairs']:,}, flips {section['flips']}, "
              f"waiting {section['waiting']}, {section['reasons'][0]})")
        print(f"  before/after, whole view: {_median(before) * 1e3:.1f} ms -> "
              f"{_median(idle) * 1e3:.1f} ms idle ({_median(before) / _median(idle):.1f}x), "
              f"{_median(fresh) * 1e3:.1f} ms with {batch} new runs per arm per read "
              f"({_median(before) / _median(fresh):.1f}x)")
        connection.close()
        if not same:
            raise SystemExit("the kept tally disagrees with one-shot pairing")


class swapped:
    """Temporarily replace `module.name` (the bench's before-variant of a section)."""

    def __init__(self, module: Any, name: str, value: Any) -> None:
        self.module, self.name, self.value = module, name, value
        self.saved: Any = None

    def __enter__(self) -> None:
        self.saved = getattr(self.module, self.name)
        setattr(self.module, self.name, self.value)

    def __exit__(self, *exc: object) -> None:
        setattr(self.module, self.name, self.saved)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    run(args.runs, args.batch, args.rounds)


if __name__ == "__main__":
    main()
