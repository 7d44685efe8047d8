"""gunicorn's forwarded-headers peer check, memoised per address: the same answers, asked once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.http import message

from router.server import peer_trust


@pytest.fixture
def gunicorn_check() -> Iterator[None]:
    """Leave gunicorn's function as each test found it."""
    original = message._ip_in_allow_list
    yield
    message._ip_in_allow_list = original


def test_the_memo_answers_as_gunicorn_does_and_asks_once_per_peer() -> None:
    """Trusted and untrusted peers, a '*' list and a network: gunicorn's answer, asked once each."""
    asked: list[tuple[str, tuple[str, ...]]] = []
    original = message._ip_in_allow_list

    def counting(ip: str, allow: Any, networks: Any) -> bool:
        asked.append((ip, tuple(allow)))
        return bool(original(ip, allow, networks))

    check = peer_trust.memoised(counting)
    cfg = Config()
    cfg.set("forwarded_allow_ips", "127.0.0.1,10.0.0.0/8")
    allow, networks = cfg.forwarded_allow_ips, cfg.forwarded_allow_networks()
    cases = [("127.0.0.1", True), ("10.1.2.3", True), ("192.168.1.1", False),
             ("not-an-ip", False)]
    for _ in range(3):
        for ip, expected in cases:
            assert check(ip, allow, networks) is expected
            assert original(ip, allow, networks) is expected
    assert check("192.168.1.1", ["*"], []) is True  # another allow list: asked afresh
    assert len(asked) == len(cases) + 1


def test_the_memo_forgets_past_its_limit() -> None:
    """Past `limit` addresses the memo starts afresh rather than growing."""
    check = peer_trust.memoised(lambda ip, allow, networks: ip.endswith("1"), limit=3)
    for n in range(10):
        assert check(f"10.0.0.{n}", [], []) is (n == 1)


def test_install_wraps_once_and_gunicorn_uses_it(gunicorn_check: None) -> None:
    """Installed, a request's peer check goes through the memo; a second install is a no-op."""
    assert peer_trust.install() is True
    assert hasattr(message._ip_in_allow_list, "__wrapped__")
    assert peer_trust.install() is False
    policy = message.HeaderPolicy()
    policy.cfg = Config()  # type: ignore[attr-defined]
    policy.peer_addr = ("127.0.0.1", 5000)  # type: ignore[attr-defined]
    assert policy._peer_is_trusted_proxy() is True
    policy.peer_addr = ("203.0.113.9", 5000)  # type: ignore[attr-defined]
    assert policy._peer_is_trusted_proxy() is False
