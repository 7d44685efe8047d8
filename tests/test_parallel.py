"""The suite's parallel run (README's `pytest -n 4`): its grouping and ordering hold."""

from __future__ import annotations

import pytest

from tests.conftest import LONGEST_FIRST, pytest_collection_modifyitems

GROUP = "grouping-probe"


@pytest.mark.xdist_group(GROUP)
def test_a_grouped_test_carries_its_group_under_xdist(request: pytest.FixtureRequest) -> None:
    """Under -n with --dist loadgroup, a test marked xdist_group carries its group in its id.

    pytest-xdist sends tests to workers by that suffix; with a pytest it does not
    follow (9.2 and xdist 3.8.0) the suffix is silently dropped and the tests that
    share an expensive module fixture each build it again on another worker.
    """
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not under pytest-xdist (-n)")
    # xdist tells its workers `loadgroup` (their own `dist` is "no").
    if not request.config.getoption("loadgroup", False):
        pytest.skip("not run with --dist loadgroup")
    assert request.node.nodeid.endswith(f"@{GROUP}"), request.node.nodeid


class _Item:
    """What the ordering hook reads of a test item: its id, slow mark, fixtures, added marks."""

    def __init__(self, name: str, *, slow: bool = False, fixturenames: tuple[str, ...] = (),
                 nodeid: str = ""):
        self.name = name
        self.nodeid = nodeid or f"tests/test_probe.py::{name}"
        self.slow = slow
        self.fixturenames = fixturenames
        self.added: list[str] = []

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.added.append(f"{mark.name}:{mark.args[0]}")


class _Worker:
    def __init__(self) -> None:
        self.workerinput = {"workerid": "gw0"}


class _Serial:
    pass


def _names(items: list[_Item]) -> list[str]:
    return [item.name for item in items]


def test_workers_hand_out_the_slow_tests_first_and_group_the_clusters() -> None:
    """In a worker the LONGEST_FIRST tests come first (in its order), then the other slow
    tests, then the rest (each in collection order), and the Cluster's tests share a group;
    in a run without -n nothing moves and nothing is grouped."""
    def collected() -> list[_Item]:
        return [_Item("a"), _Item("b", slow=True), _Item("c", fixturenames=("redis_cluster",)),
                _Item("d", slow=True), _Item("e", slow=True, nodeid=f"{LONGEST_FIRST[1]}[x]"),
                _Item("f", slow=True, nodeid=LONGEST_FIRST[0])]

    items = collected()
    pytest_collection_modifyitems(_Worker(), items)  # type: ignore[arg-type]
    assert _names(items) == ["f", "e", "b", "d", "a", "c"]
    assert [item.added for item in items] == [[], [], [], [], [], ["xdist_group:redis_cluster"]]
    items = collected()
    pytest_collection_modifyitems(_Serial(), items)  # type: ignore[arg-type]
    assert _names(items) == ["a", "b", "c", "d", "e", "f"] and all(not i.added for i in items)
