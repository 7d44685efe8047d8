"""The binding store: versions only grow, stale writers conflict, history is whole."""

from __future__ import annotations

import threading

import pytest
import redis

from bindings.errors import Conflict, NotFound
from bindings.models import Binding, Stage
from bindings.store import BindingStore, binding_key, history_key

A = Binding(current="cfg_a", candidate="cfg_b")


def _write(store: BindingStore, binding: Binding, expected: int, reason: str = "test") -> int:
    return store.write("summarizer", binding, expected_version=expected, actor="alice",
                       action="replace", reason=reason).version


def test_versions_grow_by_one_and_history_is_newest_first(redis_conn: redis.Redis) -> None:
    """Each write bumps the version by one and adds one history entry."""
    store = BindingStore(redis_conn)
    assert _write(store, A, 0, "create") == 1
    canary = A.with_changes(stage=Stage.CANARY, share=0.1)
    assert _write(store, canary, 1, "start canary") == 2
    entries = store.history("summarizer")
    assert [(e.version, e.reason) for e in entries] == [(2, "start canary"), (1, "create")]
    assert entries[0].binding == canary and entries[0].actor == "alice"
    assert store.get("summarizer").version == 2


def test_stale_writer_gets_conflict_and_nothing_is_written(redis_conn: redis.Redis) -> None:
    """Writing against an old version raises Conflict with the current version, writing nothing."""
    store = BindingStore(redis_conn)
    _write(store, A, 0)
    _write(store, A.with_changes(description="second"), 1)
    with pytest.raises(Conflict) as info:
        _write(store, A.with_changes(description="lost"), 1)
    assert info.value.details["current_version"] == 2
    assert store.get("summarizer").binding.description == "second"
    assert len(store.history("summarizer")) == 2


def test_two_stores_racing_on_one_version_exactly_one_wins(redis_url: str) -> None:
    """Two store instances writing against the same version from two threads: one wins, one 409s."""
    setup = redis.Redis.from_url(redis_url)
    BindingStore(setup).write("summarizer", A, expected_version=0, actor="a", action="create",
                              reason="r")
    setup.close()

    def writer(name: str, expected: int, barrier: threading.Barrier,
               outcomes: list[str]) -> None:
        connection = redis.Redis.from_url(redis_url)
        store = BindingStore(connection)
        barrier.wait()
        try:
            store.write("summarizer", A.with_changes(description=name),
                        expected_version=expected, actor=name, action="replace", reason=name)
            outcomes.append("won")
        except Conflict as exc:
            assert exc.status == 409
            outcomes.append("conflict")
        finally:
            connection.close()

    for round_ in range(20):
        barrier = threading.Barrier(2)
        outcomes: list[str] = []
        threads = [threading.Thread(target=writer, args=(n, round_ + 1, barrier, outcomes))
                   for n in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["conflict", "won"], outcomes
    check = redis.Redis.from_url(redis_url)
    assert len(BindingStore(check).history("summarizer")) == 21
    check.close()


def test_creating_an_existing_role_conflicts(redis_conn: redis.Redis) -> None:
    """Create (expected version 0) on an existing role is a conflict, not an overwrite."""
    store = BindingStore(redis_conn)
    _write(store, A, 0)
    with pytest.raises(Conflict):
        _write(store, A.with_changes(description="again"), 0)


def test_replacing_a_missing_role_is_not_found(redis_conn: redis.Redis) -> None:
    """Writing against a version of a role that never existed is NotFound."""
    with pytest.raises(NotFound):
        _write(BindingStore(redis_conn), A, 3)


def test_history_is_never_trimmed_and_pages(redis_conn: redis.Redis) -> None:
    """Hundreds of changes all stay in history; limit and offset page newest first."""
    store = BindingStore(redis_conn)
    for version in range(300):
        _write(store, A.with_changes(description=str(version)), version)
    assert len(store.history("summarizer")) == 300
    page = store.history("summarizer", limit=3, offset=2)
    assert [e.version for e in page] == [298, 297, 296]
    assert store.history_entry("summarizer", 7).binding.description == "6"


def test_keys_carry_the_role_as_a_cluster_hash_tag(redis_conn: redis.Redis) -> None:
    """A role's binding and history keys share the {role} hash tag."""
    _write(BindingStore(redis_conn), A, 0)
    assert binding_key("summarizer") == "rolegate:{summarizer}:binding"
    assert history_key("summarizer") == "rolegate:{summarizer}:history"
    assert redis_conn.exists(binding_key("summarizer"), history_key("summarizer")) == 2


def test_snapshot_and_generation_follow_every_write(redis_conn: redis.Redis) -> None:
    """Every write moves the generation and shows in the next snapshot."""
    store = BindingStore(redis_conn)
    assert store.snapshot() == (0, {})
    _write(store, A, 0)
    store.write("other", A, expected_version=0, actor="a", action="create", reason="r")
    generation, table = store.snapshot()
    assert generation == 2 and sorted(table) == ["other", "summarizer"]
    assert store.generation() == 2
