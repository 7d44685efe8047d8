"""The tests touch nothing of the developer's: their own Redis, claimed databases, temp data dirs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import redis

from tests.conftest import TEST_REDIS_ENV, claimed_db
from tests.servers import ROOT, OwnRedis, private_data_dir

TESTS = Path(__file__).resolve().parent


def _parent_pid(pid: int) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_session_redis_is_one_the_session_started(redis_server: str) -> None:
    """Without ROLEGATE_TEST_REDIS the session's Redis is a child of this test process."""
    if os.environ.get(TEST_REDIS_ENV):
        pytest.skip(f"{TEST_REDIS_ENV} names the server explicitly")
    client = redis.Redis.from_url(f"{redis_server}/0")
    try:
        server_pid = int(client.info("server")["process_id"])
    finally:
        client.close()
    assert _parent_pid(server_pid) == os.getpid()


def test_a_named_server_is_claimed_only_where_a_database_is_empty() -> None:
    """On a named server a database holding data is never claimed; two runs claim two databases."""
    server = OwnRedis(persist=False)
    server.start()
    try:
        base = server.url.rsplit("/", 1)[0]
        someone = redis.Redis.from_url(f"{base}/1")
        someone.set("their:data", "keep")
        with claimed_db(base, "run-a") as first, claimed_db(base, "run-b") as second:
            assert (first, second) == (2, 3)
        assert someone.get("their:data") == b"keep"
        with claimed_db(base, "run-c") as again:
            assert again == 2, "claims are released on exit"
        someone.close()
    finally:
        server.close()


def test_servers_the_tests_start_get_a_temporary_data_dir() -> None:
    """gunicorn and `rolegate serve` in tests get a temp ROLEGATE_DATA_DIR unless a test sets one."""
    with private_data_dir({}) as env:
        data_dir = Path(env["ROLEGATE_DATA_DIR"])
        assert data_dir.is_dir() and ROOT not in data_dir.parents
    assert not data_dir.exists()
    with private_data_dir({"ROLEGATE_DATA_DIR": "/chosen"}) as env:
        assert env["ROLEGATE_DATA_DIR"] == "/chosen"


def test_no_test_names_the_default_redis_or_flushes_everything() -> None:
    """No test file addresses the developer's Redis on its default port or flushes every database."""
    default = re.compile("127\\.0\\.0\\.1:" + "6379|localhost:" + "6379|flush" + "all",
                         re.IGNORECASE)
    offenders = [f"{path.name}:{number}" for path in sorted(TESTS.glob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if default.search(line)]
    assert offenders == []
