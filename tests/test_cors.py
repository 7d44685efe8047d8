"""ROLEGATE_CORS_ORIGINS: pages on listed origins resolve and evaluate OFREP from a browser.

Headless Chromium (Debian's, driven by playwright as in test_dashboard_browser)
loads a page from a second loopback server, another origin, and calls the
router with fetch() as OpenFeature's web provider does: preflights, bearer
tokens, JSON bodies, the bulk ETag read back. A page on an origin not listed
cannot read a thing, and its POST is never sent. The header-level checks
(preflight answers, error answers marked, the cross-site refusal kept for
others, a bad origin stopping the boot) run without a browser.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask
from playwright.sync_api import Browser, Page, sync_playwright
from pydantic import ValidationError
from werkzeug.serving import make_server

from router import create_app
from router.server.cors import EXPOSE_HEADERS
from tests.conftest import CALLER, OPERATOR, TOKENS, auth

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WAIT_MS = 15_000
PAGE = b"<!doctype html><html><head><title>app</title></head><body>app</body></html>"
CANARY = {"current": "sum-v1", "candidate": "sum-v2", "stage": "canary", "share": 0.5}
#: fetch() as the OFREP web provider and a resolve call send it; the answer as a page sees it.
FETCH = """async ([url, method, headers, body]) => {
  try {
    const r = await fetch(url, {method, headers, body: body === null ? undefined : body});
    const text = await r.text();
    return {status: r.status, text, etag: r.headers.get('ETag'),
            request_id: r.headers.get('X-Request-Id')};
  } catch (e) { return {error: String(e)}; }
}"""


@contextlib.contextmanager
def _serve(app: Any, port: int = 0) -> Iterator[int]:
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _page_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/html"),
                              ("Content-Length", str(len(PAGE)))])
    return [PAGE]


@contextlib.contextmanager
def _router(redis_url: str, origins: str) -> Iterator[tuple[Flask, str]]:
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "cors_origins": origins})
    try:
        with _serve(app) as port:
            yield app, f"http://127.0.0.1:{port}"
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


@pytest.fixture
def pages() -> Iterator[tuple[str, str]]:
    """Two page servers: (a listed origin, one not listed), both other origins than the router."""
    with _serve(_page_app) as listed, _serve(_page_app) as foreign:
        yield f"http://localhost:{listed}", f"http://localhost:{foreign}"


@pytest.fixture
def cors_router(redis_url: str, pages: tuple[str, str]) -> Iterator[tuple[Flask, str]]:
    """The router listing the first page's origin (and an unrelated one), summarizer in canary."""
    with _router(redis_url, f"https://app.example.com, {pages[0]}/") as (app, url):
        r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201, r.text
        yield app, url


def _preflight(url: str, origin: str, method: str = "POST") -> requests.Response:
    return requests.options(url, timeout=5, headers={
        "Origin": origin, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type"})


def test_preflights_answer_listed_origins_only(cors_router: tuple[Flask, str],
                                               pages: tuple[str, str]) -> None:
    """A listed origin's preflight is 204 naming it; any other origin's carries no CORS header."""
    _app, url = cors_router
    listed, foreign = pages
    for path, method in (("/ofrep/v1/evaluate/flags/summarizer", "POST"),
                         ("/ofrep/v1/evaluate/flags", "POST"),
                         ("/v1/resolve/summarizer", "GET")):
        ok = _preflight(url + path, listed, method)
        assert ok.status_code == 204, path
        assert ok.headers["Access-Control-Allow-Origin"] == listed
        assert method in ok.headers["Access-Control-Allow-Methods"]
        assert {"authorization", "content-type"} <= {
            h.strip().lower() for h in ok.headers["Access-Control-Allow-Headers"].split(",")}
        refused = _preflight(url + path, foreign, method)
        assert not any(h.lower().startswith("access-control-") for h in refused.headers), path
    # Not a path browsers may call from elsewhere: no CORS answer even for a listed origin.
    other = _preflight(url + "/v1/bindings/summarizer", listed, "PUT")
    assert "Access-Control-Allow-Origin" not in other.headers


def test_answers_and_errors_are_marked_for_listed_origins(cors_router: tuple[Flask, str],
                                                          pages: tuple[str, str]) -> None:
    """200s, OFREP errors and 401s name a listed origin; a foreign Origin's POST stays 403."""
    _app, url = cors_router
    listed, foreign = pages
    body = {"context": {"targetingKey": "job-1"}}
    single = url + "/ofrep/v1/evaluate/flags/summarizer"
    cases = [requests.post(single, json=body, headers={**auth(CALLER), "Origin": listed},
                           timeout=5),
             requests.get(url + "/v1/resolve/summarizer?key=job-1",  # the WSGI fast path
                          headers={**auth(CALLER), "Origin": listed}, timeout=5),
             requests.post(url + "/ofrep/v1/evaluate/flags/nobody", json=body,
                           headers={**auth(CALLER), "Origin": listed}, timeout=5),
             requests.post(single, json=body, headers={"Origin": listed}, timeout=5)]
    assert [r.status_code for r in cases] == [200, 200, 404, 401]
    for r in cases:
        assert r.headers["Access-Control-Allow-Origin"] == listed
        assert r.headers["Access-Control-Expose-Headers"] == EXPOSE_HEADERS
        assert "Origin" in r.headers["Vary"]
    other = requests.post(single, json=body, headers={**auth(CALLER), "Origin": foreign},
                          timeout=5)
    assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers
    plain = requests.post(single, json=body, headers=auth(CALLER), timeout=5)
    assert plain.status_code == 200 and "Access-Control-Allow-Origin" not in plain.headers


def test_no_origins_listed_means_no_cors(redis_url: str) -> None:
    """Unset (the default), a preflight gets Flask's plain OPTIONS answer and no CORS header."""
    with _router(redis_url, "") as (_app, url):
        r = _preflight(url + "/ofrep/v1/evaluate/flags", "http://localhost:1")
        assert "Access-Control-Allow-Origin" not in r.headers and "Vary" not in r.headers


@pytest.mark.parametrize("bad", ["app.example.com", "ftp://x.example", "https://x/path",
                                 "https://user@x.example"])
def test_a_bad_origin_stops_the_boot(redis_url: str, bad: str) -> None:
    """ROLEGATE_CORS_ORIGINS with something not an origin: the settings refuse it, naming it."""
    with pytest.raises(ValidationError, match="ROLEGATE_CORS_ORIGINS"):
        create_app({"redis_url": redis_url, "tokens": TOKENS, "cors_origins": bad})


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium; skipped, naming what is missing, without it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no browser: {CHROMIUM} is not installed (Debian's chromium package)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                      headless=True)
        try:
            yield launched
        finally:
            launched.close()


def _open(browser: Browser, origin: str) -> Page:
    page = browser.new_context().new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(origin + "/")
    return page


def _call(page: Page, url: str, method: str = "GET", body: str | None = None,
          **headers: str) -> dict[str, Any]:
    sent = {"Authorization": f"Bearer {CALLER}", **headers}
    if body is not None:
        sent["Content-Type"] = "application/json"
    answer: dict[str, Any] = page.evaluate(FETCH, [url, method, sent, body])
    return answer


@pytest.mark.slow
@pytest.mark.xdist_group("browser")
def test_a_page_on_a_listed_origin_evaluates_and_resolves(
        browser: Browser, cors_router: tuple[Flask, str], pages: tuple[str, str]) -> None:
    """From a page on another origin: OFREP single and bulk (ETag read, then 304), a resolve,
    and an OFREP error code, each the answer the router gives any other client."""
    _app, url = cors_router
    page = _open(browser, pages[0])
    context = '{"context": {"targetingKey": "job-7", "groups": ["a", "b"]}}'
    single = _call(page, url + "/ofrep/v1/evaluate/flags/summarizer", "POST", context)
    expected = requests.get(url + "/v1/resolve/summarizer?key=job-7", headers=auth(CALLER),
                            timeout=5).json()
    assert single.get("status") == 200, single
    assert f'"value":"{expected["config"]}"' in single["text"]
    bulk = _call(page, url + "/ofrep/v1/evaluate/flags", "POST", context)
    assert bulk["status"] == 200 and bulk["etag"], bulk
    again = _call(page, url + "/ofrep/v1/evaluate/flags", "POST", context,
                  **{"If-None-Match": bulk["etag"]})
    assert again["status"] == 304, again
    resolved = _call(page, url + "/v1/resolve/summarizer?key=job-7")
    assert resolved["status"] == 200 and resolved["request_id"], resolved
    assert f'"config":"{expected["config"]}"' in resolved["text"]
    missing = _call(page, url + "/ofrep/v1/evaluate/flags/nobody", "POST", context)
    assert missing["status"] == 404 and "FLAG_NOT_FOUND" in missing["text"], missing


@pytest.mark.slow
@pytest.mark.xdist_group("browser")
def test_a_page_on_another_origin_reads_nothing(
        browser: Browser, cors_router: tuple[Flask, str], pages: tuple[str, str]) -> None:
    """A page on an origin not listed: every call fails in the browser; no POST reaches a view."""
    app, url = cors_router
    page = _open(browser, pages[1])
    counter = app.extensions["rolegate_exposures"]
    counter.drain(0.0)  # what the setup assigned, if anything
    for path, method, body in (
            ("/ofrep/v1/evaluate/flags/summarizer", "POST", '{"context": {"targetingKey": "k"}}'),
            ("/ofrep/v1/evaluate/flags", "POST", '{"context": {"targetingKey": "k"}}'),
            ("/v1/resolve/summarizer?key=k", "GET", None)):
        answer = _call(page, url + path, method, body)
        assert "TypeError" in answer.get("error", ""), (path, answer)
    # The preflights failed, so no evaluation ran: nothing was assigned.
    assert counter.drain(0.0) == []

