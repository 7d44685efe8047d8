"""Per-trace invariants: each criterion key, the blocking flag, and table detection."""

from __future__ import annotations

from typing import Any

import pytest

from bindings.models import Invariants
from gatekeeper.checks.invariants import CRITERIA, TraceVerdict, check, contains_table
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def trace(**fields: Any) -> Trace:
    """A valid trace with `fields` overriding the defaults."""
    data: dict[str, Any] = {"run_id": "r1", "role": "summarizer", "config": "cfg_a",
                            "arm": "candidate", "stamps": STAMPS}
    data.update(fields)
    return Trace.model_validate(data)


def test_criteria_keys_are_stable() -> None:
    """The criterion keys are the seven the issue names and `answered`, in report order."""
    assert CRITERIA == ("answered", "artifact_exists", "must_contain_table", "forbidden_tools",
                        "allowed_tools", "required_tools", "max_steps", "max_cost_usd")


def test_no_invariants_pass_with_no_criteria() -> None:
    """A policy that turns every check off judges nothing and passes."""
    verdict = check(trace(tools=["a"], answered=False), Invariants(answered=False))
    assert verdict.passed and verdict.criteria == {} and not verdict.blocking


def test_default_policy_judges_only_whether_the_run_answered() -> None:
    """The default policy has one criterion: the run answered."""
    verdict = check(trace(tools=["a"]), Invariants())
    assert verdict.passed and verdict.criteria == {"answered": True}


def test_an_unanswered_run_fails_under_its_own_key() -> None:
    """A run that did not answer fails by default, under `answered`, whatever else it held."""
    inv = Invariants(artifact_exists=("out.md",), forbidden_tools=("rm",), max_steps=5)
    crashed = check(trace(answered=False, artifacts=["out.md"], tools=["ls"], step_count=1), inv)
    assert not crashed.passed and crashed.failed_criteria == ("answered",)
    assert crashed.criteria == {"answered": False, "artifact_exists": True,
                                "forbidden_tools": True, "max_steps": True}
    assert not crashed.blocking  # a crash is a failed run, not a tripwire breach
    assert crashed.to_json()["failed"] == ["answered"]


def test_artifact_exists() -> None:
    """Every listed artifact must be produced; the missing ones are named."""
    inv = Invariants(artifact_exists=("out/a.md", "out/b.md"))
    ok = check(trace(artifacts=["out/a.md", "out/b.md", "x"]), inv)
    bad = check(trace(artifacts=["out/a.md"]), inv)
    assert ok.passed and ok.criteria == {"answered": True, "artifact_exists": True}
    assert not bad.passed and bad.missing_artifacts == ("out/b.md",)
    assert bad.failed_criteria == ("artifact_exists",) and not bad.blocking


@pytest.mark.parametrize("text, expected", [
    ("| a | b |\n|---|---|\n| 1 | 2 |", True),
    ("intro\n a | b \n:-- | --:\n1 | 2", True),
    ("| one |\n| --- |", True),
    ("<TABLE><tr><td>1</td></tr></TABLE>", True),
    ("a | b\nnot a delimiter", False),
    ("| a | b | c |\n|---|---|", False),
    ("just prose, a pipe | here\n---", False),
    ("", False),
    ("a|b\r\n-|-\r\n1|2", True),
    pytest.param("-" * 100_000 + "|", False, id="dashes-100000"),  # a 100 KB id: PYTEST_CURRENT_TEST
])
def test_contains_table(text: str, expected: bool) -> None:
    """Markdown pipe tables (header + delimiter row) and HTML tables are detected."""
    assert contains_table(text) is expected


def test_must_contain_table() -> None:
    """must_contain_table fails a run whose output collapsed the table."""
    inv = Invariants(must_contain_table=True)
    assert check(trace(output_text="| q | n |\n|--|--|\n| 1 | 2 |"), inv).passed
    verdict = check(trace(output_text="a summary with no table"), inv)
    assert not verdict.passed and verdict.criteria == {"answered": True, "must_contain_table": False}


def test_forbidden_tools_block() -> None:
    """Calling a forbidden tool fails the run, names the tool, and is blocking."""
    inv = Invariants(forbidden_tools=("web_write", "external_egress"))
    verdict = check(trace(tools=["read", "web_write", "web_write"]), inv)
    assert not verdict.passed and verdict.forbidden == ("web_write",)
    assert verdict.blocking and verdict.criteria == {"answered": True, "forbidden_tools": False}
    assert check(trace(tools=["read"]), inv).passed


def test_allowed_tools_outside_counts_as_forbidden() -> None:
    """A tool outside the allowlist fails allowed_tools and counts as a forbidden call."""
    inv = Invariants(allowed_tools=("read", "write"))
    verdict = check(trace(tools=["read", "delete_all"]), inv)
    assert verdict.criteria == {"answered": True, "allowed_tools": False}
    assert verdict.forbidden == ("delete_all",) and verdict.blocking
    assert check(trace(tools=["write", "read"]), inv).passed


def test_empty_allowlist_forbids_every_tool() -> None:
    """allowed_tools=[] means no tool may be called."""
    inv = Invariants(allowed_tools=())
    assert check(trace(tools=[]), inv).passed
    assert check(trace(tools=["read"]), inv).blocking


def test_required_tools_lost_blocks() -> None:
    """A required tool never called is lost, fails the run and is blocking."""
    inv = Invariants(required_tools=("verifyIdentity", "refund"))
    verdict = check(trace(tools=["refund"]), inv)
    assert verdict.required_lost == ("verifyIdentity",) and verdict.blocking
    assert verdict.criteria == {"answered": True, "required_tools": False}
    assert check(trace(tools=["verifyIdentity", "refund", "refund"]), inv).passed


def test_unreported_tools_are_not_judged() -> None:
    """A trace that gives a step count but no tool names leaves the tool criteria unjudged."""
    inv = Invariants(forbidden_tools=("x",), required_tools=("y",), max_steps=3)
    verdict = check(trace(step_count=2), inv)
    assert not verdict.tools_reported and not verdict.blocking
    assert verdict.criteria == {"answered": True, "max_steps": True} and verdict.passed


def test_max_steps_from_steps() -> None:
    """max_steps reads the step count, derived from steps when not given."""
    inv = Invariants(max_steps=2)
    steps = [{"tool": "a"}, {"tool": "b"}, {"tool": "c", "error": "boom"}]
    verdict = check(trace(steps=steps), inv)
    assert verdict.criteria == {"answered": True, "max_steps": False} and not verdict.passed
    assert check(trace(steps=steps[:2]), inv).passed


def test_max_cost_usd() -> None:
    """max_cost_usd holds at the limit and fails above it."""
    inv = Invariants(max_cost_usd=0.04)
    assert check(trace(cost_usd=0.04), inv).passed
    assert check(trace(cost_usd=0.0401), inv).criteria == {"answered": True, "max_cost_usd": False}


def test_all_criteria_reported_together() -> None:
    """Every configured criterion appears, and the run passes only when all hold."""
    inv = Invariants(artifact_exists=("o.md",), must_contain_table=True,
                     forbidden_tools=("egress",), allowed_tools=("read", "write"),
                     required_tools=("read",), max_steps=5, max_cost_usd=1.0)
    verdict = check(trace(tools=["read", "write"], artifacts=["o.md"],
                          output_text="<table></table>", cost_usd=0.5), inv)
    assert set(verdict.criteria) == set(CRITERIA) and verdict.passed


def test_verdict_json_round_trip() -> None:
    """A verdict survives to_json/from_json unchanged."""
    inv = Invariants(forbidden_tools=("w",), required_tools=("r",), artifact_exists=("a",))
    verdict = check(trace(tools=["w"]), inv)
    assert TraceVerdict.from_json(verdict.to_json()) == verdict
    assert verdict.to_json()["blocking"] is True


def test_a_call_the_agent_did_not_offer_is_a_forbidden_call() -> None:
    """A step marked offered: false blocks, whatever the role's lists say; unmarked ones do not."""
    steps = [{"tool": "search"}, {"tool": "wipe_cache", "offered": False,
                                  "error": "not offered: the agent does not offer this tool"}]
    verdict = check(trace(steps=steps, output_text="done"), Invariants())
    assert verdict.blocking and verdict.forbidden == ("wipe_cache",)
    assert verdict.criteria["forbidden_tools"] is False and not verdict.passed
    listed = check(trace(steps=steps, output_text="done"),
                   Invariants(forbidden_tools=("drop_table",)))
    assert listed.forbidden == ("wipe_cache",)
    plain = check(trace(steps=[{"tool": "wipe_cache", "error": "boom"}], output_text="done"),
                  Invariants())
    assert not plain.blocking and "forbidden_tools" not in plain.criteria


def test_made_up_tool_names_are_not_kept_in_memory() -> None:
    """Verdicts naming many tools (a run may call up to 256 it was not offered, each name up to
    200 characters) are built afresh, not kept: a caller sending such runs can't fill a worker's
    memory through the verdict and window-field memos (about 190 KB a run before)."""
    import tracemalloc

    from gatekeeper.checks.invariants import policy_of
    from gatekeeper.window_fields import increments

    policy = policy_of(Invariants())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(60):
            made_up = trace(steps=[{"tool": f"{k:04d}_{i:03d}_" + "x" * 190, "offered": False}
                                   for i in range(256)])
            verdict = policy.judge(made_up)
            assert len(verdict.forbidden) == 256 and verdict.json_text
            increments(made_up, verdict)
            del made_up, verdict
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 2_000_000, f"{kept / 1e6:.1f} MB kept after 60 runs"
    few = trace(steps=[{"tool": "wipe", "offered": False}])
    assert policy.judge(few) is policy.judge(few)  # the usual verdicts are still shared


def test_long_tool_names_do_not_pile_up_in_the_window_fields_memo() -> None:
    """A run's tool sequence is remembered only when short in characters too: 64 calls of
    200-character made-up names, new each run, are not kept (about 33 KB a run before)."""
    import tracemalloc

    from gatekeeper.checks.invariants import policy_of
    from gatekeeper.window_fields import increments

    policy = policy_of(Invariants())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(120):
            made_up = trace(tools=[f"{k:04d}_{i:02d}_" + "x" * 190 for i in range(64)])
            assert increments(made_up, policy.judge(made_up))
            del made_up
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept / 1e6:.1f} MB kept after 120 runs"


def test_a_batch_sums_to_the_increments_of_its_traces() -> None:
    """`Increments` (a batch's fields, run shapes counted once) adds up to each trace's own
    `increments`: shapes repeated and not, a tool called twice, errors, a failed verdict,
    an unanswered run and an unjudged one."""
    from collections import Counter

    from gatekeeper.checks.invariants import policy_of
    from gatekeeper.window_fields import Increments, increments

    policy = policy_of(Invariants(forbidden_tools=("rm",), max_steps=4))
    runs = [trace(tools=["a", "b", "a"], time=1000.0 + k, latency_s=k % 3, tokens=k * 7,
                  cost_usd=0.001 * k) for k in range(6)]
    runs += [trace(tools=["a", "rm"], time=1000.0), trace(tool_errors=1, time=1001.0),
             trace(answered=False, step_count=9), trace(judged=False, time=1002.0),
             trace(steps=[{"tool": "a", "error": "boom"}, {"tool": "a"}], time=1003.0)]
    summed: Counter[str] = Counter()
    batch = Increments()
    for run in runs * 2:
        verdict = policy.judge(run)
        summed.update(increments(run, verdict, 1010.0))
        batch.add(run, verdict, 1010.0)
    assert batch.totals() == {name: n for name, n in summed.items() if n}
