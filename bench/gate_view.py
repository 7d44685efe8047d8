"""The gate view over 100,000 runs per arm, with the cells spread as real traffic spreads them.

    .venv/bin/python -m bench.gate_view [--runs 100000] [--jobs-per-s 1] [--rule-share 0.1]
                                         [--rounds 15] [--http] [--profile]

Starts its own diskless redis-server on a free loopback port (touches no other
Redis), registers the refunds example's spec for both configs (so the
`by_criterion` section scores the newest 1,000 runs per arm, as it does for a
role with a spec), writes a canary-stage binding whose stage began when the
first run did, and stores `--runs` traces per arm in-process (TraceStore.add,
reporter `bench-caller` as the router would stamp, untimed). Each arm's runs end
`1 / --jobs-per-s` seconds apart, so at 1 job/s a 30 s bucket holds 30 runs per
arm (about 3,300 buckets over 100,000 runs) and at 10 jobs/s 300 (about 330);
`--rule-share` of the jobs are routed by a targeting rule (a second stratum).
About 5% of current's runs and 6% of the candidate's fail, a few have tool
errors, latency, tokens and cost vary, and the exposures (assignments) of each
bucket are stored as the router would count them (1% never report).

It then times `gatekeeper.view.gate_view` in-process (every section, the drift
detectors first caught up and the closed cells moved out of the window hashes,
`gatekeeper.store.window_closed`, by untimed views), in wall time and in this process's CPU time
(`time.process_time`: the Redis server's share is not in it, so load noise
shows as the gap between the two): with no new runs, and with `--fresh` new
runs per arm stored (untimed, ending now, as live traffic does) before each
read, so nothing kept between views is spared its work on new runs. Then each
section alone, as the view builds it. The baseline is the read no view over
these windows can do without: each arm's window with its pending increments,
in one round trip (`TraceStore.windows`). With `--http`, also
`GET /v1/roles/refunds/gate` from a gunicorn router (deploy/gunicorn.conf.py,
2 gevent workers) on the same Redis, over a keep-alive connection, both ways.
With `--profile`, the cProfile (CPU time) of 5 in-process views with new runs.

A drift detector whose p0 moved (its third significant digit, as runs arrive)
starts again from the stage's first run (`Detector.outdated`) and replays up
to 5,000 runs per arm per read until caught up: such reads cost some 250 ms
more. The bench counts them; the medians hold only while they are rare.
Target (issue 23): the whole view <= 50 ms median.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.client_resolve import redis_server
from bindings.models import Binding, GatePolicy, Stage
from bindings.store import BindingStore
from gatekeeper.checks.invariants import check
from gatekeeper.checks.spec import Spec
from gatekeeper.stats.concurrent import BUCKET_S
from gatekeeper.store.configs import ConfigStore
from gatekeeper.store.exposures import Exposure, ExposureStore
from gatekeeper.store.trace_keys import closed_key, epoch_of
from gatekeeper.store.traces import Checked, TraceStore
from gatekeeper.store.window_closed import GEN
from rolegate.trace import Trace

if TYPE_CHECKING:
    from gatekeeper.view_model import GateView

ROLE = "refunds"
CURRENT, CANDIDATE = "refunds_v1", "refunds_v2"
REPORTER = "bench-caller"
GATE: dict[str, Any] = {
    "thresholds": {"min_samples": 50, "min_pass_rate": 0.9, "p95_step_ceiling": 12,
                   "p95_latency_ceiling_s": 60.0},
    "invariants": {"allowed_tools": ["read_file", "lookupOrder", "verifyIdentity"],
                   "required_tools": ["lookupOrder"]},
    "criteria": {"escalation:high-value": "blocking"}}
STAMPS = {"agent_version": "refunds-example 1.0", "instruction_hash": "sha256:refunds-v1",
          "model_id": "deterministic-example", "tool_schema_hash": "sha256:refunds-tools-v1"}
#: Runs per TraceStore.add call while filling.
CHUNK = 1_000


def trace(arm: str, job: int, ended: float, rule_every: int) -> Trace:
    """One refunds run of `job` on `arm` that ended at `ended`."""
    config = CURRENT if arm == "current" else CANDIDATE
    amount = float(40 + (job * 37) % 2_000)
    fails = job % 20 == 3 or (arm == "candidate" and job % 100 == 41)
    tools = ["read_file", "lookupOrder"]
    if amount > 1_000 and not (arm == "candidate" and job % 200 == 9):
        tools.append("verifyIdentity")
    if fails:
        tools = ["read_file"]  # lost the required lookupOrder
    latency = 2.0 + (job * 7919) % 4_000 / 1_000 + (0.3 if arm == "candidate" else 0.0)
    return Trace.model_validate({
        "run_id": f"{arm}-{job}", "role": ROLE, "config": config, "arm": arm,
        "key": f"order-{job}", "tools": tools, "tool_errors": 1 if job % 97 == 5 else 0,
        "cost_usd": round(0.004 + (job * 31) % 90 / 10_000, 6),
        "tokens": 900 + (job * 13) % 1_500, "latency_s": round(latency, 3),
        "output_text": json.dumps({"decision": "refund", "customer": {"id": f"c{job}"},
                                   "amount": amount}),
        "input": {"order": f"o{job}", "amount": amount}, "stamps": STAMPS,
        "time": ended, "reporter": REPORTER,
        "rule": "enterprise" if rule_every and job % rule_every == 0 else None})


class Fill:
    """The bench's canary stage: the binding and specs, then runs per arm stored job after job."""

    def __init__(self, connection: redis.Redis, runs: int, jobs_per_s: float,
                 rule_share: float) -> None:
        spec = Spec.model_validate_json((ROOT / "examples" / "refunds" / "spec.json").read_text())
        for config in (CURRENT, CANDIDATE):
            ConfigStore(connection).put(config, spec, actor="bench")
        self.start = time.time() - runs / jobs_per_s - 2 * BUCKET_S
        self.binding = Binding(current=CURRENT, candidate=CANDIDATE, stage=Stage.CANARY,
                               share=0.1, stage_since=self.start,
                               gate=GatePolicy.model_validate(GATE))
        BindingStore(connection).write(ROLE, self.binding, expected_version=0, actor="bench",
                                       action="create", reason="bench")
        self.connection, self.store = connection, TraceStore(connection)
        self.runs, self.jobs_per_s = runs, jobs_per_s
        self.rule_every = round(1 / rule_share) if rule_share > 0 else 0
        self.next_job = 0

    def add(self, count: int) -> None:
        """Store the next `count` jobs' runs on both arms (1% never report) and their exposures."""
        epoch, invariants = epoch_of(self.binding), self.binding.gate.invariants
        assigned: dict[tuple[str, str, int], int] = {}
        for low in range(self.next_job, self.next_job + count, CHUNK):
            batch = []
            for job in range(low, min(self.next_job + count, low + CHUNK)):
                # The stage's runs spread over its length; runs added after it end now.
                ended = (self.start + BUCKET_S + job / self.jobs_per_s if job < self.runs
                         else time.time())
                for arm in ("current", "candidate"):
                    t = trace(arm, job, ended, self.rule_every)
                    started = (t.config, arm, int((ended - t.latency_s) // BUCKET_S))
                    assigned[started] = assigned.get(started, 0) + 1
                    if job % 100 != 17:
                        batch.append(Checked(t, check(t, invariants), epoch))
            self.store.add(batch)
        ExposureStore(self.connection).add(Exposure(ROLE, config, arm, epoch, bucket, n, REPORTER)
                                           for (config, arm, bucket), n in assigned.items())
        self.next_job += count


def timed(call: Callable[[], Any], rounds: int,
          between: Callable[[], None] | None = None) -> tuple[list[float], list[float], Any]:
    """(wall s, CPU s of this process) per call over `rounds` calls, `between()` untimed first."""
    wall, cpu, answer = [], [], None
    for _ in range(rounds):
        if between is not None:
            between()
        w, c = time.perf_counter(), time.process_time()
        answer = call()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return wall, cpu, answer


def ms(values: list[float]) -> str:
    """Median and max in milliseconds."""
    return f"median {statistics.median(values) * 1e3:7.1f} ms, max {max(values) * 1e3:7.1f} ms"


def sections(store: BindingStore, traces: TraceStore, now: float) -> dict[str, Callable[[], Any]]:
    """Each section of the view alone, as `gate_view` builds it, over one context read once."""
    from gatekeeper.store.configs import ConfigStore as Configs
    from gatekeeper.store.heartbeat import HeartbeatStore
    from gatekeeper.store.judging import JudgeStore
    from gatekeeper.view import kept
    from gatekeeper.view.arms import arms_section, comparison_section
    from gatekeeper.view.context import gate_context
    from gatekeeper.view.criteria import criteria_section
    from gatekeeper.view.judges import judges_section
    from gatekeeper.view.outlook import previous_section
    from gatekeeper.view.reports import missing_for, report_counts
    from gatekeeper.view.rollout import rollout_section
    from gatekeeper.view.sections import drift_section

    ctx = gate_context(store, traces, ROLE, now)
    return {
        "context (the windows read)": lambda: gate_context(store, traces, ROLE, now),
        "arms": lambda: arms_section(ctx),
        "comparison": lambda: comparison_section(ctx),
        "by_criterion": lambda: criteria_section(ctx, Configs(traces.connection)),
        "judges": lambda: judges_section(ctx, JudgeStore(traces.connection)),
        "reports": lambda: kept.reports(ctx, report_counts(ctx)),
        "drift": lambda: drift_section(ctx),
        "concurrent": lambda: kept.concurrent(ctx, missing_for(ctx, report_counts(ctx))),
        "rollout": lambda: rollout_section(store, ctx),
        "previous": lambda: previous_section(store, traces, ctx.record, now),
        "gatekeeper (heartbeat)": lambda: HeartbeatStore(traces.connection).summary(),
    }


def http_view(url: str, rounds: int,
              between: Callable[[], None] | None = None) -> tuple[list[float], dict[str, Any]]:
    """GET /v1/roles/refunds/gate `rounds` times on one keep-alive session."""
    from bench.ingest import CALLER

    spent, view = [], {}
    with requests.Session() as session:
        for _ in range(rounds):
            if between is not None:
                between()
            started = time.perf_counter()
            answer = session.get(f"{url}/v1/roles/{ROLE}/gate", timeout=60,
                                 headers={"Authorization": f"Bearer {CALLER}"})
            spent.append(time.perf_counter() - started)
            answer.raise_for_status()
            view = answer.json()
    return spent, view


def run(args: argparse.Namespace) -> None:
    """Fill the window, then time the view every way asked."""
    from gatekeeper.view.build import gate_view

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with redis_server() as url:
        connection = redis.Redis.from_url(url)
        started = time.perf_counter()
        fill = Fill(connection, args.runs, args.jobs_per_s, args.rule_share)
        fill.add(args.runs)
        store, traces = BindingStore(connection), TraceStore(connection)
        epoch = epoch_of(fill.binding)

        def moved() -> list[Any]:
            return [connection.hget(closed_key(ROLE, config, arm, epoch), GEN)
                    for config, arm in ((CURRENT, "current"), (CANDIDATE, "candidate"))]

        # Untimed: the kept drift detectors catch up, and the stage's closed cells move out
        # of the window hashes (at most MOVE_AT_MOST a view: a stage filled at once is a
        # long stage met by its first view, as after an upgrade).
        warm, ids = 1, moved()
        view = gate_view(store, traces, ROLE, time.time())
        while not getattr(view.drift, "caught_up", True) or moved() != ids:
            ids = moved()
            view = gate_view(store, traces, ROLE, time.time())
            warm += 1
        cells = len(traces.window(ROLE, CANDIDATE, "candidate", epoch).all_cells()["run_failure"])
        print(f"gate view bench: {args.runs:,} runs per arm at {args.jobs_per_s:g} jobs/s, "
              f"{args.rule_share:.0%} by a rule: {cells:,} (bucket, stratum) cells per arm, "
              f"{0 if view.concurrent is None else view.concurrent.comparison().cells:,} "
              f"closed in both; "
              f"filled in {time.perf_counter() - started:.0f} s, {warm} views to warm up "
              f"(untimed)")

        def fresh() -> None:
            fill.add(args.fresh)

        pairs = [(CURRENT, "current"), (CANDIDATE, "candidate"), (CANDIDATE, "shadow")]
        wall, cpu, _ = timed(lambda: TraceStore(connection).windows(ROLE, pairs, epoch),
                             args.rounds)
        base = statistics.median(wall)
        print(f"  baseline: the arms' windows read (one round trip)       {ms(wall)};  "
              f"CPU {ms(cpu)}")
        behind: list[bool] = []

        def read() -> GateView:
            answer = gate_view(store, traces, ROLE, time.time())
            behind.append(not getattr(answer.drift, "caught_up", True))
            return answer

        wall, cpu, view = timed(read, args.rounds)
        print(f"  gate_view in-process, no new runs                      {ms(wall)};  "
              f"CPU {ms(cpu)}")
        wall, cpu, view = timed(read, args.rounds, fresh)
        print(f"  gate_view in-process, {args.fresh} new runs per arm before each "
              f"{ms(wall)};  CPU {ms(cpu)}   (target <= 50 ms)")
        print(f"  reads whose drift detectors were replaying (a p0 that moved restarts them): "
              f"{sum(behind)} of {len(behind)}")
        print(f"  gate_view (new runs) / baseline read: {statistics.median(wall) / base:.1f}x")
        for name, call in sections(store, traces, time.time()).items():
            wall, cpu, _ = timed(call, args.rounds)
            print(f"    {name:<28} {ms(wall)};  CPU {ms(cpu)}")
        # What the model adds to the served answer: the dump to JSON-ready data (the
        # router's jsonify then encodes it as it encoded the dict before), next to the
        # encoding itself.
        wall, cpu, dumped = timed(view.as_json, args.rounds)
        print(f"    {'as_json (GateView dump)':<28} {ms(wall)};  CPU {ms(cpu)}")
        wall, cpu, _ = timed(lambda: json.dumps(dumped, sort_keys=True), args.rounds)
        print(f"    {'json.dumps of that dump':<28} {ms(wall)};  CPU {ms(cpu)}")
        if args.http:
            from bench.ingest import gunicorn_router

            with gunicorn_router(url) as (router_url, _):
                spent, _ = http_view(router_url, args.rounds + 4)
                print(f"  GET /v1/roles/{ROLE}/gate (gunicorn), no new runs           "
                      f"{ms(spent[4:])}   (first 4 left out: each worker warms up)")
                spent, _ = http_view(router_url, args.rounds, fresh)
                print(f"  GET /v1/roles/{ROLE}/gate (gunicorn), {args.fresh} new runs per arm "
                      f"{ms(spent)}")
        if args.profile:
            profile = cProfile.Profile(time.process_time)
            profile.enable()
            for _ in range(5):
                fresh()
                gate_view(store, traces, ROLE, time.time())
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        connection.close()


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--jobs-per-s", type=float, default=1.0)
    parser.add_argument("--rule-share", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--fresh", type=int, default=30)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--profile", action="store_true")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
