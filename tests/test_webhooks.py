"""Webhook delivery: background, retried on 5xx and connection errors, never blocking emit()."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gatekeeper.webhooks import ROLLBACK, Notifier, parse_urls
from tests.servers import free_port, json_receiver, wait_for


@contextmanager
def flaky_receiver(failures: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback receiver answering 503 to the first `failures` posts, then 204."""
    seen = [0]

    def answer(body: Any) -> int:
        seen[0] += 1
        return 503 if seen[0] <= failures else 204

    with json_receiver(answer, path="/") as (url, events):
        yield url, events


def test_parse_urls() -> None:
    """ROLEGATE_WEBHOOKS is comma-separated; --webhook values add to it; blanks are dropped."""
    assert parse_urls("http://a/, ,http://b/") == ["http://a/", "http://b/"]
    assert parse_urls(["http://a/", "", "http://c/,http://d/"]) == [
        "http://a/", "http://c/", "http://d/"]
    assert parse_urls(None) == []


def test_retries_until_delivered() -> None:
    """A receiver failing twice with 503 still gets the event, exactly once."""
    with flaky_receiver(failures=2) as (url, events):
        notifier = Notifier([url], attempts=4, backoff=0.01)
        try:
            sent = notifier.emit(ROLLBACK, "r", reason="gate failed")
            wait_for(lambda: events, 5, "the webhook event")
        finally:
            notifier.close()
    assert len(events) == 1 and events[0]["id"] == sent["id"]
    assert events[0]["kind"] == "rollback" and events[0]["reason"] == "gate failed"
    assert notifier.delivered == 1


def test_dead_receiver_never_blocks_emit() -> None:
    """emit() returns at once even when nothing listens; delivery gives up after its attempts."""
    notifier = Notifier([f"http://127.0.0.1:{free_port()}/"], attempts=2, backoff=0.01,
                        timeout=0.5)
    try:
        started = time.monotonic()
        for _ in range(20):
            notifier.emit(ROLLBACK, "r")
        assert time.monotonic() - started < 0.1
    finally:
        notifier.close(timeout=10)
    assert notifier.failed >= 1 and notifier.delivered == 0
