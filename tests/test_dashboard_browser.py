"""The dashboard in headless Chromium: read the roles, roll one back from the page, see it.

Uses Debian's chromium driven by playwright; playwright's own browser download
is never used, and the tests install nothing: without a browser they skip,
saying so (`.ci/run` installs chromium before running the suite).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from playwright.sync_api import Browser, Page, expect, sync_playwright
from werkzeug.serving import BaseWSGIServer, make_server

from gatekeeper.store.configs import config_key
from router import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.dashboard_seed import STAMPS, seed
from tests.gatekeeping import (
    APPROVAL_STEPS,
    EVERY_RULE,
    binding,
    gate_view,
    keeper,
    put_canary,
    tick_until,
)
from tests.population import Population

CHROMIUM = "/usr/bin/chromium"
EXAMPLE = Path(__file__).resolve().parent.parent / "bindings.example.json"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
#: Screenshots go to a temporary directory, or to ROLEGATE_SCREENSHOTS when set
#: (ROLEGATE_SCREENSHOTS=/tmp/shots, then look at them; docs/ holds the README's).
SHOTS_ENV = "ROLEGATE_SCREENSHOTS"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# One worker runs them all under -n (xdist_group), so one Chromium starts, not one a worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("browser")]
#: Generous waits: CI shares two cores with everything else.
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; the browser tests skip, naming what is missing, without it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no browser: {CHROMIUM} is not installed (Debian's chromium package; "
                    ".ci/run installs it)")
    return CHROMIUM


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Browser]:
    """One headless Chromium for the module."""
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS,
                                      headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (its own sessionStorage) at a desktop size."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    yield opened
    context.close()


@contextlib.contextmanager
def _serving(redis_url: str, **config: object) -> Iterator[str]:
    """The router (tokens set, `config` added) on a loopback port, stopped afterwards."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, **config})
    server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


@pytest.fixture
def live(redis_url: str) -> Iterator[str]:
    """The router on a loopback port with tokens set, seeded with three roles and traces."""
    with _serving(redis_url) as url:
        with requests.Session() as session:
            seed(session, url)
        yield url


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run's screenshots go."""
    chosen = os.environ.get(SHOTS_ENV)
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _shot(page: Page, shots: Path, name: str) -> None:
    target = shots / name
    page.screenshot(path=str(target), full_page=True)
    data = target.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000, f"{name} looks empty"


def _load_roles(page: Page, url: str, token: str) -> None:
    page.goto(f"{url}/")
    expect(page.locator("#content .placeholder")).to_be_visible()
    page.fill("#token-input", token)
    page.click("#token-save")
    expect(page.locator("table.roles tbody tr")).to_have_count(3)


def test_read_roles_and_roll_back_from_the_page(page: Page, live: str, shots: Path) -> None:
    """The page lists the roles; Roll back with a reason and operator token zeroes the share."""
    _load_roles(page, live, CALLER)
    rows = page.locator("table.roles tbody tr")
    assert [r.get_attribute("data-role") for r in rows.all()] == \
        ["classifier", "extractor", "summarizer"]
    summarizer = page.locator('tr[data-role="summarizer"]')
    expect(summarizer.locator(".stage")).to_have_text("canary")
    expect(summarizer.locator("td.share")).to_have_text("0.5")
    expect(page.locator('tr[data-role="classifier"] .stage')).to_have_text("shadow")
    _shot(page, shots, "dashboard.png")

    summarizer.locator('button[data-action="rollback"]').click()
    dialog = page.locator("#action-dialog")
    expect(dialog).to_be_visible()
    page.fill("#action-reason", "pass rate dropping on the canary")
    # The caller token the page was loaded with is not enough to act.
    assert page.input_value("#action-token") == CALLER
    page.click("#action-confirm")
    expect(page.locator("#action-error")).to_contain_text("403")
    expect(summarizer.locator("td.share")).to_have_text("0.5")

    page.fill("#action-token", OPERATOR)
    page.click("#action-confirm")
    expect(dialog).to_be_hidden()
    summarizer = page.locator('tr[data-role="summarizer"]')
    expect(summarizer.locator("td.share")).to_have_text("0")
    expect(summarizer.locator(".stage")).to_have_text("rolled_back")
    expect(summarizer.locator("td.last")).to_contain_text("rollback by alice")
    _shot(page, shots, "dashboard-after-rollback.png")

    r = requests.get(f"{live}/v1/bindings/summarizer/history?limit=1", headers=auth(CALLER),
                     timeout=5)
    entry = r.json()["entries"][0]
    assert entry["action"] == "rollback" and entry["actor"] == "alice"
    assert entry["reason"] == "pass rate dropping on the canary"
    assert entry["binding"]["share"] == 0.0


def test_role_page_charts_and_timeline(page: Page, live: str, shots: Path) -> None:
    """A shadow role's page draws the pass-rate, CUSUM and trajectory charts and the history."""
    _load_roles(page, live, OPERATOR)
    page.click('tr[data-role="classifier"] a.role-link')
    expect(page.locator("#content svg.chart")).to_have_count(3)
    expect(page.locator("ol.timeline li")).to_have_count(2)
    expect(page.locator("ol.timeline li").first).to_contain_text("start shadowing v4")
    expect(page.locator("table.gate").first).to_contain_text("pass rate")
    assert page.locator("#content svg.chart polyline").count() >= 2
    _shot(page, shots, "dashboard-role.png")
    page.goto(f"{live}/roles/summarizer")
    expect(page.locator("#content svg.chart")).to_have_count(2)
    _shot(page, shots, "dashboard-canary.png")


def test_page_without_token_shows_no_data_and_cannot_act(page: Page, live: str) -> None:
    """Without a token the page shows no roles, and the API refuses a tokenless action."""
    page.goto(f"{live}/")
    expect(page.locator("#content .placeholder")).to_be_visible()
    assert page.locator("table.roles").count() == 0
    status = page.evaluate("""async () => (await fetch('/v1/bindings/summarizer/rollback',
        {method: 'POST', headers: {'Content-Type': 'application/json'},
         body: JSON.stringify({reason: 'x'})})).status""")
    assert status == 401


@pytest.fixture
def example(redis_url: str) -> Iterator[str]:
    """The router with tokens, holding the shipped bindings.example.json and a few traces."""
    roles = json.loads(EXAMPLE.read_text())["roles"]
    with _serving(redis_url) as url:
        with requests.Session() as session:
            for role, binding in roles.items():
                r = session.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                                timeout=5)
                assert r.status_code == 201, r.text
            r = session.put(f"{url}/v1/configs/summarizer@2026-11-18", headers=auth(OPERATOR),
                            json={"spec": {"tools": [{"name": "read_thread", "required": True}]}},
                            timeout=5)
            assert r.status_code == 201, r.text
            traces = [{"run_id": f"s-{arm}-{i}", "role": "summarizer", "config": config,
                       "arm": arm, "key": f"job-{i}", "tools": ["read_thread"],
                       "output_text": "| a | b |\n|---|---|\n| 1 | 2 |",
                       "artifacts": ["handoff.md"], "stamps": STAMPS}
                      for config, arm in (("summarizer@2026-10-02", "current"),
                                          ("summarizer@2026-11-18", "candidate"))
                      for i in range(5)]
            r = session.post(f"{url}/v1/traces", json={"traces": traces}, headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 200, r.text
        yield url


def test_every_example_role_page_loads_and_a_broken_one_says_why(
        page: Page, example: str, redis_conn: redis.Redis) -> None:
    """The shipped example's roles all render; a gate that cannot be read is said, not hidden."""
    _load_roles(page, example, CALLER)
    roles = ("summarizer", "support-triage", "sql-analyst")
    for role in roles:
        expect(page.locator(f'tr[data-role="{role}"] .verdict')).not_to_have_text("unreadable")
    for role in roles:
        page.goto(f"{example}/roles/{role}")
        expect(page.locator("#content table.gate").first).to_contain_text("pass rate")
        assert page.locator("#content p.error").count() == 0
    page.goto(f"{example}/roles/summarizer")
    expect(page.locator("#content")).to_contain_text("must_contain_table")
    # The candidate's stored config record stops reading back.
    redis_conn.hset(config_key("summarizer@2026-11-18"), "record", '{"config": 1}')
    page.goto(f"{example}/roles/summarizer")
    expect(page.locator("#content p.error")).to_contain_text("summarizer@2026-11-18")
    assert "{\"error\"" not in page.locator("body").inner_text()
    page.goto(f"{example}/")
    expect(page.locator('tr[data-role="summarizer"] .verdict')).to_have_text("unreadable")
    expect(page.locator('tr[data-role="sql-analyst"] .verdict')).not_to_have_text("unreadable")


def test_role_page_says_what_next_and_keeps_a_rollbacks_evidence(page: Page, live: str,
                                                                    shots: Path) -> None:
    """The role page shows "what next"; after a rollback, the ended stage's numbers."""
    _load_roles(page, live, OPERATOR)
    gate = requests.get(f"{live}/v1/roles/classifier/gate", headers=auth(CALLER),
                        timeout=5).json()
    page.click('tr[data-role="classifier"] a.role-link')
    what_next = page.locator("#what-next")
    for line in gate["next"]["lines"]:
        expect(what_next).to_contain_text(line)
    expect(page.locator("#previous-stage")).to_have_count(0)

    page.goto(f"{live}/roles/summarizer")
    before = requests.get(f"{live}/v1/roles/summarizer/gate", headers=auth(CALLER),
                          timeout=5).json()["arms"]["candidate"]
    assert before["n"] == 60
    page.locator('#content button[data-action="rollback"]').click()
    page.fill("#action-reason", "tables vanished from handoffs")
    page.click("#action-confirm")
    expect(page.locator("#stage")).to_have_text("rolled_back")
    kept = page.locator("#previous-stage")
    expect(kept).to_contain_text("Rolled back by alice: tables vanished from handoffs")
    table = kept.locator("#previous-gate-table")
    expect(table.locator("thead")).to_contain_text("candidate")
    expect(table.locator("tbody tr").nth(1)).to_contain_text("60")
    # The new window is empty; the kept table still holds the ended canary's numbers.
    expect(page.locator("#gate-table tbody tr").nth(1)).not_to_contain_text("60")
    expect(page.locator("#what-next")).to_contain_text("rolled back")
    _shot(page, shots, "dashboard-rolled-back.png")


def test_no_gatekeeper_banner_appears_and_clears(page: Page, live: str, shots: Path) -> None:
    """Overview and role page: a banner while nobody ticks; gone after a gatekeeper's tick."""
    _load_roles(page, live, CALLER)
    banner = page.locator("#gatekeeper-status")
    expect(banner).to_have_attribute("data-status", "absent")
    expect(banner).to_contain_text("No gatekeeper is judging")
    page.goto(f"{live}/roles/summarizer")
    expect(page.locator("#gatekeeper-status")).to_contain_text("No gatekeeper is judging")
    expect(page.locator("#what-next")).not_to_contain_text("at the gatekeeper's next tick")
    _shot(page, shots, "dashboard-no-gatekeeper.png")

    with keeper(live, "gk-browser", interval=30.0) as gatekeeper:
        gatekeeper.once()
        page.reload()
        banner = page.locator("#gatekeeper-status")
        expect(banner).to_have_attribute("data-status", "ok")
        expect(banner).to_contain_text("gatekeeper gk-browser leads; last tick")
        expect(banner).not_to_contain_text("No gatekeeper is judging")
        page.goto(f"{live}/")
        expect(page.locator("#gatekeeper-status")).to_have_attribute("data-status", "ok")


def test_an_approval_step_waits_and_the_button_approves(page: Page, live: str,
                                                          shots: Path) -> None:
    """A passed approval step holds; Approve (operator, with a reason) lets the rollout go on."""
    put_canary(live, "approver", "cfg-good", APPROVAL_STEPS)
    with keeper(live, "gk-approve-page") as gatekeeper, Population(live, ["approver"]):
        tick_until(gatekeeper, lambda: gate_view(live, "approver")["next"]["state"]
                   == "awaiting_approval", "the approval step to pass its gate")
        page.goto(f"{live}/roles/approver")
        page.fill("#token-input", OPERATOR)
        page.click("#token-save")
        expect(page.locator("#what-next")).to_contain_text("awaits an operator's approval")
        _shot(page, shots, "dashboard-awaiting-approval.png")
        page.locator('#content button[data-action="approve"]').click()
        page.fill("#action-reason", "canary tables checked by hand")
        page.click("#action-confirm")
        expect(page.locator("#action-dialog")).to_be_hidden()
        tick_until(gatekeeper, lambda: gate_view(live, "approver")["stage"]
                   in ("full", "stable"), "the rollout to continue after approval")
    page.reload()
    expect(page.locator("#stage")).not_to_have_text("canary")
    entries = requests.get(f"{live}/v1/bindings/approver/history", headers=auth(CALLER),
                           timeout=5).json()["entries"]
    approvals = [e for e in entries if e["action"] == "approve"]
    assert approvals and approvals[0]["actor"] == "alice"
    assert approvals[0]["reason"] == "canary tables checked by hand"


def test_role_page_intervals_say_what_they_are(page: Page, live: str) -> None:
    """Each pass rate shows the always-valid interval and the one-look Wilson one, labelled."""
    _load_roles(page, live, CALLER)
    page.click('tr[data-role="summarizer"] a.role-link')
    table = page.locator("#gate-table")
    expect(table.locator(".interval-cs").first).to_have_attribute(
        "title", "always-valid 95%: holds however often you look")
    expect(table.locator(".interval-fixed").first).to_have_attribute(
        "title", "fixed-sample 95% Wilson: valid for one look only")
    legend = page.locator("p.legend").first
    expect(legend).to_contain_text("always-valid 95%")
    expect(legend).to_contain_text("holds however often you look")
    expect(legend).to_contain_text("valid for a single look only")
    view = requests.get(f"{live}/v1/roles/summarizer/gate", headers=auth(CALLER),
                        timeout=5).json()
    low, high = view["arms"]["candidate"]["pass_rate_cs"]
    shown = table.locator(".interval-cs").nth(1).inner_text()
    assert shown == f"[{low:.3g}, {high:.3g}]"


@pytest.mark.usefixtures("quick_buckets")
def test_a_policy_hold_holds_and_the_page_says_why(page: Page, live: str, shots: Path) -> None:
    """gate.responses hold: a broken candidate is paused, not rolled back; the page says why."""
    put_canary(live, "holder", "cfg-broken", [0.5], {rule: "hold" for rule in EVERY_RULE})
    with keeper(live, "gk-hold-page") as gatekeeper, Population(live, ["holder"]):
        tick_until(gatekeeper, lambda: binding(live, "holder")["paused"],
                   "the policy hold to pause the role")
    page.goto(f"{live}/roles/holder")
    page.fill("#token-input", CALLER)
    page.click("#token-save")
    expect(page.locator("#stage")).to_have_text("canary")
    expect(page.locator(".paused").first).to_be_visible()
    expect(page.locator("#what-next")).to_contain_text("held by policy (gate.responses[")
    _shot(page, shots, "dashboard-held.png")


@pytest.fixture
def budgeted(redis_url: str) -> Iterator[str]:
    """The seeded router with ROLEGATE_FLEET_BUDGET 0.005 (two rollouts live at 1% each)."""
    with _serving(redis_url, fleet_budget=0.005) as url:
        with requests.Session() as session:
            seed(session, url)
        yield url


def test_the_overview_says_what_the_fleet_gets_and_who_is_over_budget(
        page: Page, budgeted: str, shots: Path) -> None:
    """The overview ends with the fleet's line and the router's budget; a role whose alpha
    is brought within its share leaves the over-budget list."""
    _load_roles(page, budgeted, CALLER)
    fleet = page.locator("#fleet")
    expect(fleet.locator(".fleet-line")).to_contain_text(
        "fleet: 2 rollout(s) live, each rolls back a healthy candidate with chance <= 1.00%")
    budget = page.locator("#fleet-budget li")
    expect(budget.first).to_contain_text(
        "fleet budget (ROLEGATE_FLEET_BUDGET): 0.005 false rollback(s) a day at 2 rollout(s) "
        "a day needs thresholds.alpha <= 0.000625")
    over = page.locator("#fleet-budget li.over")
    expect(over).to_have_count(2)
    expect(over.first).to_contain_text("over budget: classifier")
    _shot(page, shots, "dashboard-fleet.png")

    # The team sets the alpha it was shown on summarizer (the router never does).
    record = requests.get(f"{budgeted}/v1/bindings/summarizer", headers=auth(CALLER),
                          timeout=5).json()
    body = record["binding"]
    body["gate"]["thresholds"]["alpha"] = 0.000625
    r = requests.put(f"{budgeted}/v1/bindings/summarizer", json=body, timeout=5,
                     headers={**auth(OPERATOR), "If-Match": str(record["version"])})
    assert r.status_code == 200, r.text
    page.reload()
    expect(page.locator("#fleet-budget li.over")).to_have_count(1)
    expect(page.locator("#fleet-budget li.over")).to_contain_text("classifier")
