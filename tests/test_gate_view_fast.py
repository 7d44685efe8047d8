"""The gate view's quick reads: the same windows, sections and figures as the whole reads give."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from bindings.models import Binding, GatePolicy, Invariants, Stage
from bindings.store import BindingStore
from gatekeeper.checks.invariants import check
from gatekeeper.checks.spec import Spec
from gatekeeper.stats.concurrent import BUCKET_S
from gatekeeper.store.configs import ConfigStore
from gatekeeper.store.trace_ingest import Checked
from gatekeeper.store.trace_keys import epoch_of, stream_key
from gatekeeper.store.traces import TraceStore
from gatekeeper.store.window_reads import EVIDENCE
from gatekeeper.view import kept
from gatekeeper.view.arms import arms_section, comparison_section
from gatekeeper.view.concurrent import concurrent_section
from gatekeeper.view.context import GateContext, arm_configs, context_of, trusted_window
from gatekeeper.view.reports import missing_for, report_counts, reports_section
from gatekeeper.view.scored import SAMPLE, scored_runs
from gatekeeper.window import WindowStats
from rolegate.trace import Trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ROLE = "summarizer"
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
GATE = {"thresholds": {"min_samples": 20, "p95_step_ceiling": 4,
                       "p95_latency_ceiling_s": 9.0},
        "invariants": {"forbidden_tools": ["egress"], "required_tools": ["read"]}}
#: Reporters: two that send most runs, one whose few runs are all still pending.
REPORTERS = ("team-a", "12:ops", "late")
RUNS = 2_400


def trace(arm: str, i: int, ended: float) -> Trace:
    """Run `i` of `arm`: varied tools, outcome, latency, stratum and reporter."""
    tools = ["read"] * (1 + i % 3) + (["egress"] if i % 211 == 0 else [])
    if i % 19 == (4 if arm == "candidate" else 7):
        tools = ["write"]  # lost the required tool: a failed run
    return Trace.model_validate({
        "run_id": f"{arm}-{i}", "role": ROLE, "arm": arm, "key": f"job-{i}",
        "config": "cfg_b" if arm == "candidate" else "cfg_a", "stamps": STAMPS, "tools": tools,
        "tool_errors": int(i % 23 == 0), "cost_usd": 0.001 * (i % 13), "tokens": 100 + i % 900,
        "latency_s": 1.0 + (i * 37 % 500) / 100, "time": ended,
        "rule": "beta" if i % 7 == 0 else None, "reporter": REPORTERS[i % 2]})


def fill(connection: redis.Redis, trusted: tuple[str, ...] | None = None) -> Binding:
    """A canary stage of RUNS runs per arm, 3 per 30 s bucket, some increments still pending."""
    start = time.time() - RUNS * BUCKET_S / 3 - 4 * BUCKET_S
    binding = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY, share=0.1,
                      stage_since=start,
                      gate=GatePolicy.model_validate({**GATE, "trusted_reporters": trusted}))
    BindingStore(connection).write(ROLE, binding, expected_version=0, actor="test",
                                   action="create", reason="test")
    store, epoch = TraceStore(connection), epoch_of(binding)
    checked = [Checked(t, check(t, binding.gate.invariants), epoch)
               for i in range(RUNS) for arm in ("current", "candidate")
               if (t := trace(arm, i, start + BUCKET_S + i * BUCKET_S / 3))]
    for low in range(0, len(checked) - 40, 500):
        store.add(checked[low:min(low + 500, len(checked) - 40)])
    for item in checked[-40:]:  # one by one: they wait in the pending lists
        store.add([item])
    late = [trace(arm, RUNS + i, time.time() - 2 * BUCKET_S) for i in range(3)
            for arm in ("current", "candidate")]
    store.add([Checked(t.model_copy(update={"reporter": "late"}),
                       check(t, binding.gate.invariants), epoch) for t in late])
    return binding


def whole_context(connection: redis.Redis, now: float) -> GateContext:
    """The gate context read as before: every window and every reporter's window whole."""
    record = BindingStore(connection).get(ROLE)
    traces = TraceStore(connection)
    epoch = epoch_of(record.binding)
    configs = arm_configs(record)
    pairs = [(config, arm) for arm, config in configs.items()]
    windows = traces.windows(ROLE, pairs, epoch)
    by_reporter = dict(zip(configs, traces.windows_by_reporter(ROLE, pairs, epoch)))
    trusted = record.binding.gate.trusted_reporters
    if trusted is not None:
        windows = [trusted_window(by_reporter[arm], trusted) for arm in configs]
    arms = {arm: (config, window) for (arm, config), window in zip(configs.items(), windows)}
    return GateContext(ROLE, record, epoch, arms, traces, now, by_reporter)


def sections(ctx: GateContext) -> dict[str, Any]:
    """The sections that read the context's windows."""
    counts = report_counts(ctx)
    return {"arms": arms_section(ctx), "comparison": comparison_section(ctx),
            "concurrent": concurrent_section(ctx, missing_for(ctx, counts)),
            "reports": reports_section(ctx, counts)}


@pytest.mark.parametrize("trusted", [None, ("team-a", "late")])
def test_the_quick_context_gives_the_sections_the_whole_reads_give(
        redis_conn: redis.Redis, trusted: tuple[str, ...] | None) -> None:
    """Per-arm windows, per-reporter evidence and every window-reading section are the same."""
    fill(redis_conn, trusted)
    now = time.time()
    record = BindingStore(redis_conn).get(ROLE)
    quick = context_of(record, TraceStore(redis_conn), now)
    whole = whole_context(redis_conn, now)
    assert quick.arms == whole.arms
    assert quick.arms["candidate"][1].n == (RUNS // 2 if trusted else RUNS) + 3
    assert set(quick.by_reporter["current"]) == set(REPORTERS)
    for arm, reporters in whole.by_reporter.items():
        for name, window in reporters.items():
            fields = quick.by_reporter[arm][name].fields
            if trusted is None:
                assert set(fields) <= set(EVIDENCE)
                assert all(fields[f] == window.fields[f] for f in EVIDENCE)
            else:
                assert fields == window.fields
    assert sections(quick) == sections(whole)
    assert sections(quick)["concurrent"]["metrics"]["run_failure"]["cells"] > 800


def test_a_second_read_remembers_the_reporters_and_sees_a_new_one(
        redis_conn: redis.Redis) -> None:
    """The names one read found are asked for at once the next time; a newcomer is read too."""
    binding = fill(redis_conn)
    store = TraceStore(redis_conn)
    pairs = [("cfg_a", "current"), ("cfg_b", "candidate")]
    epoch = epoch_of(binding)
    first = store.stage_windows(ROLE, pairs, epoch)
    assert store.stage_windows(ROLE, pairs, epoch) == first
    newcomer = trace("current", RUNS + 50, time.time()).model_copy(update={"reporter": "new"})
    store.add([Checked(newcomer, check(newcomer, binding.gate.invariants), epoch)] * 1)
    again = store.stage_windows(ROLE, pairs, epoch)
    assert again[0][1]["new"].n == 1
    assert again[0][0] is not None and first[0][0] is not None
    assert again[0][0].n == first[0][0].n + 1
    assert again[0] == (store.windows(ROLE, pairs[:1], epoch)[0], again[0][1])


def _plain(window: WindowStats, prefix: str) -> dict[str, int]:
    """What the readers read under `prefix`, by a plain scan of every field."""
    return {k[len(prefix):]: v for k, v in window.fields.items() if k.startswith(prefix) and v}


def test_window_readers_match_a_plain_scan_and_follow_changes(redis_conn: redis.Redis) -> None:
    """Histograms, tallies and cells read from the grouped fields equal a scan; an add shows."""
    binding = fill(redis_conn)
    window = TraceStore(redis_conn).window(ROLE, "cfg_b", "candidate", epoch_of(binding))
    plain = WindowStats(dict(window.fields))
    assert window.steps_histogram() == {int(k): v for k, v in _plain(plain, "steps:").items()}
    assert window.latency_histogram() == {int(k) / 1000: v
                                          for k, v in _plain(plain, "lat:").items()}
    assert window.tool_tally() == dict(sorted(_plain(plain, "tool:").items(),
                                              key=lambda kv: (-kv[1], kv[0])))
    assert window.forbidden_tools() == _plain(plain, "forbid:") != {}
    assert window.reported_buckets() == {int(k): v for k, v in _plain(plain, "rep:").items()}
    cells = window.all_cells()
    runs = {k: v for k, v in plain.fields.items() if k.startswith("cn:")}
    failed = Counter({k[3:]: v for k, v in plain.fields.items() if k.startswith("cf:")})
    assert cells["run_failure"] == {(int(k[3:].split(":")[0]), k[3:].split(":", 1)[1]):
                                    (n, failed[k[3:]]) for k, n in runs.items()}
    assert window.cells("tool_error") == cells["tool_error"]
    before = window.n
    extra = trace("candidate", RUNS + 99, 8.0 * BUCKET_S)  # ended in bucket 8, started in 7
    assert extra.latency_s < BUCKET_S
    window.add(extra, check(extra, binding.gate.invariants))
    assert window.n == before + 1
    assert window.all_cells()["run_failure"][(7, "beta")] == (1, 0)  # run 2,499: rule beta
    window.fields["steps:99"] += 2  # through `fields`: the grouped reads follow
    assert window.steps_histogram()[99] == 2


def test_kept_scored_runs_are_the_whole_reads_runs(redis_conn: redis.Redis) -> None:
    """Scored runs kept across reads equal a fresh store's: after new runs, a trim, a new spec."""
    spec = Spec.model_validate_json((EXAMPLES / "refunds" / "spec.json").read_text())
    configs = ConfigStore(redis_conn)
    configs.put("cfg_a", spec, actor="test")
    store = TraceStore(redis_conn, retention=1_100)
    epoch, since = "1.000000", 1.0

    def add(low: int, high: int) -> None:
        runs = [trace("current", i, 10.0).model_copy(update={"output_text": json.dumps(
            {"decision": "refund", "amount": 500 + i})} if i % 3 else {}) for i in range(low, high)]
        store.add([Checked(t, check(t, Invariants(required_tools=("read",))), epoch) for t in runs])

    def both() -> tuple[list[Any], list[Any]]:
        asks = [("cfg_a", "current", configs.find("cfg_a")), ("cfg_b", "shadow", None)]
        kept = scored_runs(store, ROLE, since, asks)
        whole = scored_runs(TraceStore(redis_conn), ROLE, since, asks)
        assert kept[1] == whole[1] == []  # an arm with no runs
        return kept[0], whole[0]

    add(0, 700)
    kept, whole = both()
    assert kept == whole and len(kept) == 700
    assert {v for _, verdicts in kept for v in verdicts.values()} >= {True, False}
    add(700, 760)
    kept, whole = both()
    assert kept == whole and kept[-1][0] == "job-759"
    add(760, 1_050)  # past SAMPLE: the oldest kept runs fall out
    kept, whole = both()
    assert kept == whole and len(kept) == SAMPLE
    oldest = kept[0][0]
    add(1_050, 2_000)  # the stream trimmed (near 1,100) past the oldest kept run
    kept, whole = both()
    assert kept == whole and len(kept) == SAMPLE
    assert redis_conn.xlen(stream_key(ROLE, "cfg_a", "current")) < 1_200
    assert oldest not in {job for job, _ in kept}
    configs.put("cfg_a", spec.model_copy(update={"escalation": ()}), actor="test")
    kept, whole = both()
    assert kept == whole
    assert not any(key.startswith("escalation:") for _, verdicts in kept for key in verdicts)
    redis_conn.delete(stream_key(ROLE, "cfg_a", "current"))
    add(5_000, 5_010)
    kept, whole = both()
    assert kept == whole and len(kept) == 10
    store.retention = 300  # a role's trace_retention under SAMPLE: trimmed below kept runs
    add(6_000, 6_600)
    kept, whole = both()
    assert kept == whole and len(kept) < 500


def test_kept_sections_are_the_sections_computed_afresh(redis_conn: redis.Redis) -> None:
    """concurrent and reports kept between views equal fresh ones: open runs, late runs, time."""
    binding = fill(redis_conn)
    store, bindings = TraceStore(redis_conn), BindingStore(redis_conn)
    epoch = epoch_of(binding)

    def both(now: float) -> tuple[Any, Any]:
        ctx = context_of(bindings.get(ROLE), store, now)
        counts = report_counts(ctx)
        missing = missing_for(ctx, counts)
        quick = (kept.concurrent(ctx, missing), kept.reports(ctx, counts))
        return quick, (concurrent_section(ctx, missing), reports_section(ctx, counts))

    def add(i: int, ended: float, tools: tuple[str, ...] = ("write",),
            rule: str | None = None) -> None:
        for arm in ("current", "candidate"):
            t = trace(arm, i, ended).model_copy(update={"tools": tools, "rule": rule})
            store.add([Checked(t, check(t, binding.gate.invariants), epoch)])

    now = time.time()
    first, fresh = both(now)
    assert first == fresh and first[0]["metrics"]["run_failure"]["cells"] > 1_000
    assert len(kept._kept[store]) == 2
    add(RUNS + 1, now)  # in an open bucket: the kept sections stand
    again, fresh = both(now)
    assert again == fresh == (first[0], again[1]) and again[1] == first[1]
    add(RUNS + 2, binding.stage_since + 5 * BUCKET_S, ("read",))  # late, a closed cell's pass
    late, fresh = both(now)
    assert late == fresh and late[0] != first[0]
    add(RUNS + 3, binding.stage_since + 9 * BUCKET_S, rule="gamma")  # late, a new closed cell
    late, fresh = both(now)
    assert late == fresh and late[0]["metrics"] != again[0]["metrics"]
    later, fresh = both(now + 3 * BUCKET_S)  # buckets closed since
    assert later == fresh and later[0]["closed_before"] == late[0]["closed_before"] + 3
    late[0]["metrics"].clear()  # a caller changing its view changes nothing kept
    assert both(now)[0] == both(now)[1]
