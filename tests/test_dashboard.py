"""The dashboard's pages and fragments, without a browser: auth, content, headers, charts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.store.configs import config_key
from router import create_app
from router.dashboard.svg import bar_chart, line_chart
from tests.conftest import CALLER, OPERATOR, auth
from tests.dashboard_seed import seed


def test_shell_is_public_but_holds_no_data(client: FlaskClient) -> None:
    """With tokens set, / answers without a token but contains no role data."""
    seed(client)
    r = client.get("/")
    assert r.status_code == 200 and r.mimetype == "text/html"
    assert "summarizer" not in r.text
    assert "Paste a token" in r.text
    assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    assert r.headers["X-Frame-Options"] == "DENY"


def test_fragments_need_a_token(client: FlaskClient) -> None:
    """The data fragments answer 401 without a token and render with a caller's."""
    seed(client)
    assert client.get("/ui/roles").status_code == 401
    assert client.get("/ui/roles/summarizer").status_code == 401
    r = client.get("/ui/roles", headers=auth(CALLER))
    assert r.status_code == 200
    for role in ("summarizer", "classifier", "extractor"):
        assert f'data-role="{role}"' in r.text
    assert "canary" in r.text and "shadow" in r.text


def test_role_fragment_shows_gate_history_and_charts(client: FlaskClient) -> None:
    """A role page has the gate table, the history with who and why, and three SVG charts."""
    seed(client)
    r = client.get("/ui/roles/classifier", headers=auth(CALLER))
    assert r.status_code == 200, r.text
    page = r.text
    assert "Per criterion" in page and "pass rate" in page
    assert "start shadowing v4" in page and "alice" in page
    assert page.count("<svg") == 3  # pass rate, CUSUM, trajectory histogram (shadow)
    assert "no data yet" not in page
    r = client.get("/ui/roles/summarizer", headers=auth(CALLER))
    assert r.text.count("<svg") == 2  # no trajectory histogram outside shadow
    assert 'data-action="rollback"' in r.text


def test_unknown_role_fragment_is_404(client: FlaskClient) -> None:
    """An unknown role's fragment is a JSON 404, a bad name a 400."""
    assert client.get("/ui/roles/nobody", headers=auth(CALLER)).status_code == 404
    assert client.get("/ui/roles/-bad", headers=auth(CALLER)).status_code == 400


@pytest.fixture
def open_app(redis_url: str) -> Iterator[Flask]:
    """The router with ROLEGATE_TOKENS unset."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_open_server_renders_data_into_the_page(open_app: Flask) -> None:
    """With no tokens configured the pages carry their data and a warning banner."""
    client = open_app.test_client()
    seed(client)
    r = client.get("/")
    assert 'data-role="summarizer"' in r.text and "server is open" in r.text
    r = client.get("/roles/summarizer")
    assert r.status_code == 200 and "<svg" in r.text
    assert client.get("/roles/nobody").status_code == 404


def test_an_unreadable_gate_is_said_in_html_on_both_pages(open_app: Flask,
                                                          redis_conn: redis.Redis) -> None:
    """A role whose gate view fails: the role page says why in HTML, the overview flags the row."""
    client = open_app.test_client()
    r = client.put("/v1/bindings/summarizer", json={"current": "summarizer@2026-10-02"})
    assert r.status_code == 201, r.json
    r = client.get("/roles/summarizer")
    assert r.status_code == 200 and "Per criterion" in r.text
    # A config record that no longer reads back (written by hand, or by another version).
    redis_conn.hset(config_key("summarizer@2026-10-02"), "record", '{"config": 1}')
    r = client.get("/roles/summarizer")
    assert r.status_code == 500 and r.mimetype == "text/html"
    assert "could not be read" in r.text and "summarizer@2026-10-02" in r.text
    assert '{"error"' not in r.text
    r = client.get("/")
    assert r.status_code == 200 and "unreadable" in r.text
    assert client.get("/v1/roles/summarizer/gate").status_code == 500  # the API agrees


def test_static_files_served(client: FlaskClient) -> None:
    """The script and stylesheet the pages load are served."""
    for name in ("dashboard.js", "dashboard.css"):
        with client.get(f"/ui/static/{name}") as r:
            assert r.status_code == 200 and len(r.data) > 500


def test_line_chart_escapes_and_scales() -> None:
    """Series names are escaped and points land inside the plot."""
    svg = str(line_chart({"<b>arm</b>": [(0.0, 0.0), (10.0, 1.0)]}, title="t", y_min=0, y_max=1))
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert "polyline" in svg
    assert "no data yet" in str(line_chart({}, title="t"))


def test_bar_chart_lists_every_class() -> None:
    """Each histogram class gets a bar and its count."""
    svg = str(bar_chart({"same": 5, "reordered": 2, "tool_lost": 0}, title="t"))
    assert svg.count("<rect") == 3 and ">5<" in svg and "tool_lost" in svg


def test_actions_from_dashboard_need_operator(client: FlaskClient) -> None:
    """The API the dashboard's buttons call refuses a caller token and takes an operator's."""
    seed(client)
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"}, headers=auth(CALLER))
    assert r.status_code == 403
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200


def test_cross_site_writes_refused_even_when_open(open_app: Flask) -> None:
    """On an open server a write from another origin is refused; same origin and CLI pass."""
    client = open_app.test_client()
    seed(client)
    evil = {"Origin": "https://evil.example"}
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "x"}, headers=evil)
    assert r.status_code == 403 and r.json["error"]["code"] == "forbidden"
    r = client.post("/v1/bindings/summarizer/pause", data='{"reason": "x"}',
                    headers={"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"})
    assert r.status_code == 403
    assert client.get("/v1/bindings/summarizer").json["binding"]["stage"] == "canary"
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                    headers={"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.json
    r = client.post("/v1/bindings/summarizer/resume", json={"reason": "x"},
                    headers={"Origin": "https://localhost"})  # TLS ends at a proxy
    assert r.status_code == 200
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                    headers={"Origin": "null"})
    assert r.status_code == 403
    r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"})
    assert r.status_code == 200


def test_cusum_path_climbs_alarms_at_h_and_resets() -> None:
    """The CUSUM path rises with failures, is drawn at h where it alarms, then restarts."""
    from gatekeeper.stats.pairing import Run
    from router.dashboard.data import cusum_path

    runs = [Run(key=str(i), passed=False) for i in range(12)]
    path = cusum_path("run_failure", runs, p0=0.1, shift=0.1, h=3.0)
    ys = [y for _, y in path]
    assert ys[0] == pytest.approx(0.85) and ys[1] == pytest.approx(1.7)
    assert 3.0 in ys  # the alarm, drawn at h
    after = ys[ys.index(3.0) + 1]
    assert after < 1.0  # restarted from zero
    thinned = cusum_path("run_failure", runs * 50, p0=0.1, shift=0.1, h=3.0, max_points=40)
    assert len(thinned) <= 40 and max(y for _, y in thinned) == 3.0


def test_pass_rate_series_buckets_by_run_time() -> None:
    """Pass rate per time bucket, from each run's own end time, empty buckets left out."""
    from gatekeeper.checks.invariants import TraceVerdict
    from gatekeeper.store.traces import StoredTrace
    from rolegate.trace import Trace
    from router.dashboard.data import pass_rate_series
    from tests.dashboard_seed import STAMPS

    def stored(i: int, when: float, passed: bool) -> StoredTrace:
        trace = Trace.model_validate({"run_id": f"r{i}", "role": "r", "config": "c",
                                      "arm": "current", "stamps": STAMPS, "time": when})
        return StoredTrace(id=f"{i}-0", time=1000.0, trace=trace,
                           verdict=TraceVerdict(passed=passed))

    traces = [stored(0, 0.0, True), stored(1, 1.0, False), stored(2, 99.0, True)]
    series = pass_rate_series(traces, buckets=4, span=(0.0, 100.0))
    assert series == [(12.5, 0.5), (87.5, 1.0)]
    assert pass_rate_series([]) == []


def test_role_without_traces_renders_empty_charts(client: FlaskClient) -> None:
    """A role with no traces yet gets its page, with charts that say there is no data."""
    r = client.put("/v1/bindings/fresh", json={"current": "a", "candidate": "b"},
                   headers=auth(OPERATOR))
    assert r.status_code == 201
    r = client.get("/ui/roles/fresh", headers=auth(CALLER))
    assert r.status_code == 200, r.text
    assert r.text.count("no data yet") == 2
    assert "No criteria judged" in r.text


def test_bucketing_is_shown(client: FlaskClient) -> None:
    """The role page says the unit, the salt the rollout drew and the version; the overview
    marks a role bucketed by an attribute."""
    r = client.put("/v1/bindings/tenants", headers=auth(OPERATOR), json={
        "current": "a", "candidate": "b", "stage": "canary", "share": 0.2, "bucket_by": "tenant"})
    salt = r.json["binding"]["salt"]
    page = client.get("/ui/roles/tenants", headers=auth(CALLER)).text
    assert f"by tenant, salt <code>{salt}</code>, v2" in page
    assert client.put("/v1/bindings/plain", headers=auth(OPERATOR),
                      json={"current": "a"}).status_code == 201
    assert "by job key, unsalted, v1" in client.get("/ui/roles/plain", headers=auth(CALLER)).text
    overview = client.get("/ui/roles", headers=auth(CALLER)).text
    assert overview.count('class="muted small bucket-by"') == 1 and "by tenant" in overview
