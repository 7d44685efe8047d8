"""Shadow pairing kept in Redis: advanced over new runs only, same report as one-shot pairing, CAS-saved."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from bindings.models import Invariants
from gatekeeper.checks.invariants import check
from gatekeeper.stats.pair_tally import Queue, Tally, advance
from gatekeeper.stats.pairing import MAX_LISTED_KEYS, PairedReport, Run, compare, pair_runs
from gatekeeper.store.paired_state import Arms, PairedStates
from gatekeeper.store.traces import Checked, TraceStore
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
#: More than three tool calls fails a run; that is the only way one fails here.
INV = Invariants(max_steps=3)
ROLE, EPOCH = "r", "100.000000"
ARMS = Arms(ROLE, EPOCH, "cfg_a", "cfg_b", None)
REQUIRED = ("verify",)
ALPHA, MIN_SAMPLES = 0.05, 30
#: Tool sequences: passing ones (<= 3 calls), failing ones, some without "verify".
SEQUENCES = [("verify", "refund"), ("refund", "verify"), ("refund",), ("verify", "refund", "mail"),
             ("verify", "read", "read", "refund"), ("read", "read", "read", "refund"),
             ("verify", "lookup")]
ARM_CONFIG = {"current": "cfg_a", "shadow": "cfg_b"}


class Feed:
    """Appends runs to the current and shadow streams and keeps the same runs in memory."""

    def __init__(self, connection: redis.Redis) -> None:
        self.store = TraceStore(connection)
        self.runs: dict[str, list[Run]] = {"current": [], "shadow": []}
        self.count = 0

    def add(self, arm: str, jobs: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Store one `arm` run per (job key, tool sequence)."""
        traces = []
        for key, tools in jobs:
            self.count += 1
            traces.append(Trace.model_validate({
                "run_id": f"run-{self.count}", "role": ROLE, "config": ARM_CONFIG[arm],
                "arm": arm, "key": key, "stamps": STAMPS, "tools": list(tools)}))
        checked = [Checked(t, check(t, INV), EPOCH) for t in traces]
        if checked:
            self.store.add(checked)
        self.runs[arm] += [Run(t.key, passed=c.verdict.passed, tools=tuple(t.tools))
                           for t, c in zip(traces, checked)]

    def one_shot(self) -> dict[str, Any]:
        """The report of pairing every stored run at once."""
        return _report(compare(pair_runs(self.runs["current"], self.runs["shadow"]),
                               alpha=ALPHA, min_samples=MIN_SAMPLES, required_tools=REQUIRED))


class CountingStates(PairedStates):
    """PairedStates that records how many stream entries each read went through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_sizes: list[int] = []

    def _read(self, arms: Arms, start: Tally) -> tuple[list[tuple[str, Run]], ...]:
        batches = super()._read(arms, start)
        self.read_sizes.append(sum(len(b) for b in batches))
        return batches


def _report(report: PairedReport) -> dict[str, Any]:
    return report.as_dict()


def _view(states: PairedStates) -> dict[str, Any]:
    return _report(states.advance(ARMS, REQUIRED).tally.report(alpha=ALPHA,
                                                              min_samples=MIN_SAMPLES))


def _jobs(rng: random.Random, keys: Sequence[str]) -> list[tuple[str, Sequence[str]]]:
    return [(key, rng.choice(SEQUENCES)) for key in keys]


@pytest.fixture
def feed(redis_conn: redis.Redis) -> Feed:
    """Empty current and shadow streams on the test database."""
    return Feed(redis_conn)


@pytest.mark.parametrize("seed", range(8))
def test_pure_tally_in_random_chunks_matches_one_shot(seed: int) -> None:
    """Any interleaving and chunking of both arms' entries ends at compare(pair_runs(...))."""
    rng = random.Random(seed)

    def entries(arm: int, n: int) -> list[tuple[str, Run]]:
        out = []
        for i in range(n):
            key = "" if rng.random() < 0.05 else f"job-{rng.randrange(120)}"
            out.append((f"{1000 + 2 * i + arm}-0",
                        Run(key, passed=rng.random() < 0.7, tools=rng.choice(SEQUENCES))))
        return out

    current, shadow = entries(0, 500), entries(1, 450)
    tally = Tally(required=REQUIRED)
    waiting: dict[str, Queue] = {}
    at = {"c": 0, "s": 0}
    while at["c"] < len(current) or at["s"] < len(shadow):
        take_c, take_s = rng.randrange(40), rng.randrange(40)
        # Re-sending a few already counted entries must not count them twice.
        step = advance(tally, waiting, current[max(0, at["c"] - 3):at["c"] + take_c],
                       shadow[at["s"]:at["s"] + take_s])
        at["c"] += take_c
        at["s"] += take_s
        tally = step.tally
        for key, queue in step.changed.items():
            if queue.runs:
                waiting[key] = queue
            else:
                waiting.pop(key, None)
        assert all(q.runs for q in waiting.values())
    expected = compare(pair_runs([r for _, r in current], [r for _, r in shadow]),
                       alpha=ALPHA, min_samples=MIN_SAMPLES, required_tools=REQUIRED)
    assert tally.report(alpha=ALPHA, min_samples=MIN_SAMPLES) == expected
    assert expected.regressions > MAX_LISTED_KEYS  # the capped lists were exercised


def test_pure_late_pair_is_listed_in_shadow_order() -> None:
    """A pair whose current run came last is listed by its shadow run's place, as one-shot does."""
    shadow = [(f"{2000 + i}-0", Run(f"k{i}", passed=False)) for i in range(3)]
    current_late = [("3000-0", Run("k0", passed=True))]
    current_early = [("1500-0", Run("k2", passed=True)), ("1501-0", Run("k1", passed=True))]
    first = advance(Tally(), {}, current_early, shadow)
    assert [i.key for i in first.tally.regressed] == ["k1", "k2"]
    assert first.changed == {"k0": Queue("shadow", first.changed["k0"].runs)}
    second = advance(first.tally, {"k0": first.changed["k0"]}, current_late, [])
    assert [i.key for i in second.tally.regressed] == ["k0", "k1", "k2"]
    assert second.changed == {"k0": Queue("shadow", ())}


def test_incremental_reads_match_one_shot_pairing(feed: Feed, redis_conn: redis.Redis) -> None:
    """Reads between batches where keys arrive shadow-first or current-first give one-shot's report."""
    rng = random.Random(7)
    states = PairedStates(redis_conn)
    pool = [f"job-{i}" for i in range(150)]
    for _ in range(12):
        feed.add("current", _jobs(rng, rng.sample(pool, rng.randrange(0, 40))))
        feed.add("shadow", _jobs(rng, rng.sample(pool, rng.randrange(0, 40))))
        assert _view(states) == feed.one_shot()
    assert feed.one_shot()["pairs"] > 100
    # A key's shadow run first, read, then its current run, read: they pair.
    feed.add("shadow", [("late-key", ("refund",))])
    before = _view(states)
    assert before == feed.one_shot()
    feed.add("current", [("late-key", ("verify", "refund"))])
    view = _view(states)
    assert view == feed.one_shot()
    assert view["pairs"] == before["pairs"] + 1
    assert view["agree"]["pass"] == before["agree"]["pass"] + 1
    assert view["trajectory"]["MISSING_CALL"] == before["trajectory"]["MISSING_CALL"] + 1


def test_read_processes_only_new_entries(feed: Feed, redis_conn: redis.Redis) -> None:
    """A read after N new runs goes through exactly N entries; a read with none, through 0."""
    rng = random.Random(3)
    states = CountingStates(redis_conn)
    feed.add("current", _jobs(rng, [f"job-{i}" for i in range(200)]))
    feed.add("shadow", _jobs(rng, [f"job-{i}" for i in range(150)]))
    states.advance(ARMS, REQUIRED)
    feed.add("shadow", _jobs(rng, [f"job-{i}" for i in range(150, 157)]))
    feed.add("current", _jobs(rng, [f"job-{i}" for i in range(200, 203)]))
    done = states.advance(ARMS, REQUIRED)
    states.advance(ARMS, REQUIRED)
    assert states.read_sizes == [350, 10, 0]
    assert done.tally.pairs == 157
    assert done.waiting == {"current": 46, "shadow": 0}
    assert _report(done.tally.report(alpha=ALPHA, min_samples=MIN_SAMPLES)) == feed.one_shot()


def test_far_behind_catches_up_over_bounded_reads(feed: Feed, redis_conn: redis.Redis) -> None:
    """With at most 10 entries per arm per read, 35 and 22 runs take 4 reads, flagged until done."""
    rng = random.Random(5)
    feed.add("current", _jobs(rng, [f"job-{i}" for i in range(35)]))
    feed.add("shadow", _jobs(rng, [f"job-{i}" for i in range(34, 12, -1)]))
    states = CountingStates(redis_conn, max_advance=10)
    flags = [states.advance(ARMS, REQUIRED).caught_up for _ in range(4)]
    assert flags == [False, False, False, True]
    assert states.read_sizes == [20, 20, 12, 5]
    assert _view(states) == feed.one_shot()


def test_concurrent_readers_do_not_double_count(feed: Feed, redis_conn: redis.Redis) -> None:
    """A reader that lost the compare-and-set writes nothing and shows the winner's newer tally."""
    rng = random.Random(11)
    feed.add("current", _jobs(rng, [f"job-{i}" for i in range(30)]))
    feed.add("shadow", _jobs(rng, [f"job-{i}" for i in range(20)]))
    read_done, winner_saved = threading.Event(), threading.Event()

    class Slow(PairedStates):
        def _read(self, arms: Arms, start: Tally) -> tuple[list[tuple[str, Run]], ...]:
            batches = super()._read(arms, start)
            read_done.set()
            assert winner_saved.wait(5)
            return batches

    slow_result: list[Tally] = []
    slow = threading.Thread(
        target=lambda: slow_result.append(Slow(redis_conn).advance(ARMS, REQUIRED).tally))
    slow.start()
    assert read_done.wait(5)
    feed.add("shadow", _jobs(rng, [f"job-{i}" for i in range(20, 25)]))
    fast = PairedStates(redis_conn).advance(ARMS, REQUIRED)
    winner_saved.set()
    slow.join(5)
    stored, waiting, _ = PairedStates(redis_conn).load(ARMS)
    assert fast.tally.pairs == 25 and stored is not None and stored.pairs == 25
    assert slow_result == [stored] and stored == fast.tally
    assert waiting == {"current": 5, "shadow": 0}
    assert _report(stored.report(alpha=ALPHA, min_samples=MIN_SAMPLES)) == feed.one_shot()


def test_racing_readers_count_every_pair_once(feed: Feed, redis_conn: redis.Redis) -> None:
    """Four threads reading while runs arrive on both arms end with one-shot's report."""
    errors: list[BaseException] = []

    def reader() -> None:
        states = PairedStates(redis_conn, max_advance=25)
        try:
            for _ in range(15):
                states.advance(ARMS, REQUIRED)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    rng = random.Random(13)
    for i in range(10):
        feed.add("shadow", _jobs(rng, [f"job-{i}-{j}" for j in range(12)]))
        feed.add("current", _jobs(rng, [f"job-{i}-{j}" for j in range(4, 16)]))
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert _view(PairedStates(redis_conn)) == feed.one_shot()


def test_waiting_keys_are_capped_oldest_first(feed: Feed, redis_conn: redis.Redis) -> None:
    """Beyond max_waiting unmatched keys an arm drops its longest-waiting ones and counts them."""
    states = PairedStates(redis_conn, max_waiting=5)
    feed.add("current", [(f"old-{i}", ("verify",)) for i in range(4)])
    states.advance(ARMS, REQUIRED)
    # Arrival is kept to the millisecond (the stream id's time part); on a quick
    # machine both adds can fall in one, and then "oldest" is a tie.
    time.sleep(0.005)
    feed.add("current", [(f"new-{i}", ("verify",)) for i in range(4)])
    capped = states.advance(ARMS, REQUIRED)
    assert capped.waiting == {"current": 5, "shadow": 0}
    assert capped.dropped == {"current": 3, "shadow": 0}
    # old-0..2 were dropped: their shadow mates now wait instead; old-3 still pairs.
    feed.add("shadow", [(f"old-{i}", ("verify",)) for i in range(4)])
    after = states.advance(ARMS, REQUIRED)
    assert after.tally.pairs == 1
    assert after.waiting == {"current": 4, "shadow": 3}
    assert after.dropped == {"current": 3, "shadow": 0}


def test_changed_required_tools_start_over(feed: Feed, redis_conn: redis.Redis) -> None:
    """A tally judged against other required tools is recounted from the stage's first run."""
    feed.add("current", [("a", ("verify", "mail")), ("b", ("verify", "mail"))])
    feed.add("shadow", [("a", ("verify",)), ("b", ("mail",))])
    states = PairedStates(redis_conn)
    first = states.advance(ARMS, ("verify",)).tally
    assert first.blocking_n == 1 and first.pairs == 2
    again = states.advance(ARMS, ("mail", "verify")).tally
    assert again.pairs == 2 and again.blocking_n == 2 and again.lost == ("mail", "verify")
    assert states.advance(ARMS, ("mail", "verify")).tally == again


def test_gate_view_pairs_incrementally(client: Any) -> None:
    """The gate view's paired section counts each new pair once, whichever arm came first."""
    from tests.conftest import CALLER, OPERATOR, auth
    from tests.population import trace

    # alpha 1.0 would be refused; 0.99 puts the stage-end McNemar look at 0.0495.
    policy = {"thresholds": {"min_samples": 20, "alpha": 0.99},
              "invariants": {"artifact_exists": ["out.md"]}}
    answer = client.put("/v1/bindings/p", headers=auth(OPERATOR), json={
        "current": "cfg-a", "candidate": "cfg-bad", "stage": "shadow", "gate": policy})
    assert answer.status_code == 201, answer.text

    def post(config: str, arm: str, low: int, high: int) -> dict[str, Any]:
        traces = [trace("p", config, arm, i, "t") for i in range(low, high)]
        assert client.post("/v1/traces", headers=auth(CALLER),
                           json={"traces": traces}).status_code == 200
        view = client.get("/v1/roles/p/gate", headers=auth(CALLER))
        assert view.status_code == 200
        paired: dict[str, Any] = view.get_json()["paired"]
        return paired

    assert post("cfg-bad", "shadow", 0, 30)["pairs"] == 0
    first = post("cfg-a", "current", 0, 50)
    assert (first["pairs"], first["waiting"]) == (30, {"current": 20, "shadow": 0})
    last = post("cfg-bad", "shadow", 30, 60)
    assert last["pairs"] == 50 and last["waiting"] == {"current": 0, "shadow": 10}
    # cfg-bad fails jobs i % 20 in (1, 2) where cfg-a passes: 1, 2, 21, 22, 41, 42.
    assert last["flips"] == {"pass_to_fail": 6, "fail_to_pass": 0}
    assert last["regressed_keys"] == ["job-1", "job-2", "job-21", "job-22", "job-41", "job-42"]
    assert last["caught_up"] is True and last["trajectory"]["SAME"] == 50
    # McNemar one-sided p = 2 ** -6 < its share of alpha (0.0495) over 50 >= 20 pairs.
    assert last["verdict"] == "fail" and last["mcnemar"]["one_sided"] == 2 ** -6
