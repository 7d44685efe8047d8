"""The operator dashboard at `/`: server-rendered pages, inline SVG, no build step.

How it stays safe without cookies:

- The page shells (`/`, `/roles/<role>`) are public HTML with no data in them
  unless the server runs open (ROLEGATE_TOKENS unset), when they are rendered
  whole, since the API is open too.
- The data comes as server-rendered HTML fragments (`/ui/...`) that need a
  bearer token like the JSON API. The page's script sends the token the
  operator pasted, kept in the tab's sessionStorage.
- Rollback, pause, resume and promote are calls to the JSON API with that
  bearer token. A browser never attaches an Authorization header on its own,
  so another site cannot forge these requests: there is nothing to forge with.
- A strict Content-Security-Policy (no inline script or style) and
  `frame-ancestors 'none'` keep injected markup inert and the page unframeable.
- A server running open (no tokens) has no bearer token to protect it, so any
  write a browser sends from another origin (its `Origin` or `Sec-Fetch-Site`
  says so) is refused outright; clients that are not browsers send neither.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Response, current_app, render_template, request
from flask.typing import ResponseReturnValue

from bindings.errors import NotFound, RolegateError
from bindings.models import Stage, validate_role_name
from gatekeeper.store.heartbeat import HeartbeatStore
from gatekeeper.view.fleet import fleet_report
from router.api.traces import trace_store
from router.dashboard.data import overview, role_detail
from router.dashboard.svg import bar_chart, line_chart
from router.server import cors
from router.server.auth import may_act_on, require
from router.server.errors import BadRequest, Forbidden
from router.server.services import services_of

bp = Blueprint("dashboard", __name__, template_folder="templates", static_folder="static",
               static_url_path="/ui/static")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
#: Which buttons a role in each stage offers (pause/resume depend on the flag instead).
STAGE_ACTIONS = {
    Stage.STABLE: ("promote",),
    Stage.ROLLED_BACK: ("promote",),
    Stage.SHADOW: ("promote", "rollback"),
    Stage.CANARY: ("promote", "rollback"),
    Stage.FULL: ("promote", "rollback"),
}
ACTION_LABELS = {"rollback": "Roll back", "pause": "Pause", "resume": "Resume",
                 "promote": "Promote", "approve": "Approve"}


@bp.app_template_filter("when")
def when(epoch: float | None) -> str:
    """An epoch time as UTC text; a dash for none."""
    if epoch is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


@bp.app_template_filter("figure")
def figure(value: Any) -> str:
    """A gate figure for a table cell: three significant digits, a dash for none."""
    if value is None:
        return "—"
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _refuse_cross_site_writes() -> None:
    """Refuse a state-changing request a browser sent on behalf of another site."""
    if request.method in SAFE_METHODS:
        return
    if cors.listed(request.headers.get("Origin"), request.path):
        return  # an origin ROLEGATE_CORS_ORIGINS lists, evaluating (router.server.cors)
    if request.headers.get("Sec-Fetch-Site") == "cross-site":
        raise Forbidden("cross-site request refused", reason="Sec-Fetch-Site: cross-site")
    origin = request.headers.get("Origin")
    # Host only, not scheme: behind a TLS-terminating proxy the browser says
    # https while this server sees http, for the same site.
    if origin is not None and urlsplit(origin).netloc != request.host:
        raise Forbidden("cross-site request refused: Origin does not match this server",
                        origin=origin[:200])


bp.before_app_request(_refuse_cross_site_writes)


def _secure(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    return response


def _html(body: str, status: int = 200) -> Response:
    return _secure(Response(body, status=status, mimetype="text/html"))


def _open() -> bool:
    return bool(services_of(current_app).tokens.open)


def _role(role: str) -> str:
    try:
        return validate_role_name(role)
    except ValueError as exc:
        raise BadRequest(str(exc), field="role") from None


def actions(binding: Any) -> list[tuple[str, str]]:
    """The (action, label) buttons a role's binding offers, most drastic first."""
    names = list(STAGE_ACTIONS[binding.stage])
    waiting = binding.needs_approval() and binding.approved is None
    # The stage machine refuses to promote a paused role or an unapproved step: no button.
    if (binding.candidate is None or binding.paused or waiting) and "promote" in names:
        names.remove("promote")
    names.append("resume" if binding.paused else "pause")
    if waiting:
        names.append("approve")
    order = ("rollback", "pause", "resume", "approve", "promote")
    return [(name, ACTION_LABELS[name]) for name in order if name in names]


def _overview_fragment() -> str:
    services = services_of(current_app)
    rows = overview(services.store, trace_store(), services.store.clock(), visible=may_act_on)
    try:
        keeper = HeartbeatStore(services.redis).summary()
    except RolegateError:
        keeper = None
    # What the fleet gets, as `rolegate status` ends with it, and the router's budget.
    fleet = fleet_report(services.store, trace_store(), services.store.clock(),
                         services.settings.fleet_budget, visible=may_act_on)
    return render_template("_roles.html", rows=rows, actions=actions, keeper=keeper,
                           fleet=fleet)


def _role_fragment(role: str) -> str:
    services = services_of(current_app)
    detail = role_detail(services.store, trace_store(), role, services.store.clock())
    binding = detail["binding"]
    policy = binding.gate
    charts = {
        "pass_rate": line_chart(
            detail["pass_rates"], title="Pass rate over time, per arm", y_min=0.0, y_max=1.0,
            hlines={"min pass rate": policy.thresholds.min_pass_rate}),
        "cusum": line_chart(
            detail["cusum"], title=f"CUSUM statistic of the {detail['cusum_arm']} arm, per metric",
            y_min=0.0, x_is_time=False,
            # A derived h differs per metric (its p0): drawn only when the policy fixes one.
            hlines=None if policy.drift.h is None else {"alarm h": policy.drift.h}),
        "trajectory": None if detail["trajectory"] is None else bar_chart(
            detail["trajectory"], title="Trajectory changes, shadow against current"),
    }
    return render_template("_role.html", d=detail, charts=charts, actions=actions(binding))


@bp.get("/")
def index() -> ResponseReturnValue:
    """The overview shell; with the data inside when the server runs open."""
    fragment = _overview_fragment() if _open() else None
    return _html(render_template("index.html", fragment=fragment, open=_open()))


@bp.get("/roles/<role>")
def role_page(role: str) -> ResponseReturnValue:
    """One role's shell; with the data inside when the server runs open."""
    role = _role(role)
    fragment = None
    if _open():
        try:
            fragment = _role_fragment(role)
        except NotFound:
            return _html(render_template("role.html", role=role, fragment=None, open=True,
                                         missing=True), 404)
        except RolegateError as exc:
            # A page, not the API: say what failed in the page, never as raw JSON.
            return _html(render_template("role.html", role=role, fragment=None, open=True,
                                         missing=False, error=exc.message), exc.status)
    return _html(render_template("role.html", role=role, fragment=fragment, open=_open(),
                                 missing=False))


@bp.get("/ui/roles")
@require("caller", "reviewer", "gatekeeper")
def roles_fragment() -> ResponseReturnValue:
    """The overview table as an HTML fragment (needs a token, like the API)."""
    return _html(_overview_fragment())


@bp.get("/ui/roles/<role>")
@require("caller", "reviewer", "gatekeeper")
def role_fragment(role: str) -> ResponseReturnValue:
    """One role's detail as an HTML fragment (needs a token, like the API)."""
    return _html(_role_fragment(_role(role)))
