"""`rolegate status [ROLE] [--watch] [--wait --timeout 30m]`: where a rollout stands, and what next.

Everything shown comes from the gate view (`GET /v1/roles/<role>/gate`): the arms'
verdicts and numbers, and its `next` section, which is the gatekeeper's own
decide() on that view explained in plain words, so this command, the dashboard
and the gatekeeper never disagree. `--wait` exits 0 when the candidate became
stable, 1 when it was rolled back, 2 on timeout: a deploy pipeline can wait on it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import click

from gatekeeper.stats.fleet import outlook
from gatekeeper.stats.fleet_budget import BUDGET_SOURCE, BudgetAdvice, budget_advice
from rolegate.http import ApiClient, ApiError
from router.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, api_command, echo_json
from router.cli.effect import effect_lines
from router.cli.run_lines import matched_lines

#: --wait's answers: the candidate became stable, it was rolled back, time ran out.
WAIT_STABLE, WAIT_ROLLED_BACK, WAIT_TIMEOUT = EXIT_OK, EXIT_REFUSED, EXIT_USAGE
#: Which arms the status shows in each stage (the one the gate judges last).
SHOWN_ARMS = {"shadow": ("current", "shadow"), "canary": ("current", "candidate"),
              "full": ("current", "candidate")}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms]?)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "": 1.0}
#: Clears a terminal and homes the cursor, for --watch's redraw.
CLEAR = "\x1b[H\x1b[2J"


def duration(text: str) -> float:
    """Seconds in a duration like 30m, 90s, 1h30m or plain seconds; ValueError if not one."""
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration like 30m, 90s or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def _duration_option(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def gate_path(role: str) -> str:
    """The gate view's path for `role`."""
    return f"/v1/roles/{quote(role, safe='')}/gate"


def bucketing_words(binding: dict[str, Any]) -> str:
    """How a role's jobs are split, in an operator's words: "by tenant, salt 9f86..., version 2"."""
    salt = binding.get("salt")
    return (f"by {binding.get('bucket_by') or 'job key'}, "
            f"{f'salt {salt}' if salt else 'unsalted'}, version {binding.get('bucket_version', 1)}")


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def arm_line(arm: str, figures: dict[str, Any]) -> list[str]:
    """One arm's verdict with its numbers, then its reasons, indented."""
    # The always-valid interval: a person running `status` again and again looks many
    # times, and a fixed-sample 95% CI would mislead one of those looks in twenty.
    interval = figures.get("pass_rate_cs") or figures.get("pass_rate_interval")
    kind = "always-valid 95%" if figures.get("pass_rate_cs") else "95% CI"
    ci = "" if not interval else f" ({kind} {_percent(interval[0])}-{_percent(interval[1])})"
    unjudged = figures.get("unjudged") or 0
    # A run whose spans said nothing the gate can judge is no pass: shown beside n.
    extra = f"  unjudged {unjudged}" if unjudged else ""
    counted = figures.get("counting_missing")
    if counted and counted.get("missing"):
        # gate.reports.missing_runs "fail": over every run assigned, beside the reported runs'.
        extra += (f"  ({_percent(counted.get('pass_rate'))} counting {counted['missing']} "
                  f"unreported as failed)")
    lines = [(f"  {arm:<10} {figures.get('config', '-')}  {figures.get('verdict', '-')}  "
             f"n={figures.get('n', 0)}  pass {_percent(figures.get('pass_rate'))}{ci}{extra}")]
    for reason in figures.get("reasons", []):
        message = reason.get("message") if isinstance(reason, dict) else str(reason)
        lines.append(f"{'':13}- {message}")
    return lines


def criteria_lines(view: dict[str, Any]) -> list[str]:
    """Every criterion of the shown arms: each arm's passes of n, its mode and its test.

    The gated keys (`by_criterion.gate`, `gatekeeper.stats.criteria_gate`) show their
    mode and the evidence against the threshold; the invariants' own criteria, gated
    through the pass rate, show their arms' counts alone.
    """
    section = view.get("by_criterion") or {}
    shown = [arm for arm in SHOWN_ARMS.get(str(view.get("stage")), ("current",))
             if arm in (section.get("arms") or {})]
    tallies = {arm: (section["arms"][arm].get("criteria") or {}) for arm in shown}
    judged = shown[-1] if len(shown) > 1 else None
    tests = {k["key"]: k for k in ((section.get("gate") or {}).get(judged) or [])}
    keys = sorted({key for counts in tallies.values() for key in counts} | set(tests))
    if not keys:
        return []
    width = min(40, max(len(key) for key in keys))
    lines = [f"  criteria   {' / '.join(shown)}, passed of scored"]
    for key in keys:
        cells = []
        for arm in shown:
            t = tallies[arm].get(key) or {}
            cells.append(f"{t.get('passed', 0)}/{t.get('n', 0)}" if t else "-")
        line = f"{'':13}{key:<{width}}  {'  '.join(f'{c:>7}' for c in cells)}"
        test = tests.get(key)
        if test is not None:
            line += f"  {test['mode']}"
            if test.get("test") in ("paired", "rate"):
                line += f" e^{test['log_e']:.2f} of e^{test['threshold']:.2f}"
            if test.get("message"):
                line += f": {test['message']}"
            if test.get("acts"):
                line += "  FAILS"
        lines.append(line.rstrip())
    return lines


def judge_lines(view: dict[str, Any]) -> list[str]:
    """The online judge's day: judged, errors, skips and spend against the budget."""
    judges = view.get("judges")
    if not judges:
        return []
    day, budget = judges.get("day") or {}, judges.get("budget") or {}
    lines = [(f"  judge      {judges.get('model')}: judged {day.get('judged', 0)}, "
              f"errors {day.get('errors', 0)}, skipped {day.get('skipped_full', 0)} (queue "
              f"full) {day.get('skipped_budget', 0)} (budget), waiting {day.get('waiting', 0)};"
              f" today {day.get('calls', 0)} of {budget.get('calls')} calls, "
              f"{day.get('tokens', 0)} of {budget.get('tokens')} tokens")]
    if budget.get("message"):
        lines.append(f"{'':13}{budget['message']}")
    if day.get("last_error"):
        lines.append(f"{'':13}last error: {day['last_error']}")
    return lines


def missing_policy_words(reports: dict[str, Any]) -> str:
    """What `gate.reports.missing_runs` does with the runs that never reported."""
    policy = reports.get("missing_runs") or {}
    grace = f"after {reports.get('grace_s', 0):g} s"
    if policy.get("applied"):
        return f"missing runs count as failed (gate.reports.missing_runs: fail, {grace})"
    if policy.get("why_not"):
        return f"missing runs not counted as failed: {policy['why_not']}"
    return f"missing runs ignored (gate.reports.missing_runs: {policy.get('policy', '-')})"


def clock(moment: float | None) -> str:
    """An epoch time as "2026-12-01 12:05 UTC"."""
    if moment is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moment))


def stage_words(view: dict[str, Any]) -> str:
    """The stage and share in an operator's words: "canary 0.1", "shadow", "rolled back"."""
    stage = str(view.get("stage", "?"))
    if stage == "canary":
        return f"canary {view.get('share', 0):g}"
    return stage.replace("_", " ")


def render(view: dict[str, Any], binding: dict[str, Any] | None = None) -> list[str]:
    """The full status of one role, from its gate view (and its binding: the bucketing)."""
    candidate = view.get("candidate") or "-"
    paused = ", PAUSED" if view.get("paused") else ""
    lines = [(f"{view['role']}: {stage_words(view)}{paused} (version {view['version']}, "
             f"since {clock((view.get('window') or {}).get('since'))})"),
             f"  configs    current {view.get('current')}, candidate {candidate}"]
    if binding is not None:
        lines.append(f"  bucketing  {bucketing_words(binding)}")
    holdback = (view.get("concurrent") or {}).get("holdback")
    if view.get("stage") == "full" and holdback is not None:
        # full's control: the share of bucketed jobs kept on current while it bakes.
        lines.append(f"  holdback   {holdback:g} of bucketed jobs stay on current "
                     f"(the control full is compared with)")
    arms = view.get("arms", {})
    for arm in SHOWN_ARMS.get(str(view.get("stage")), ("current",)):
        if arm in arms:
            lines += arm_line(arm, arms[arm])
    lines += effect_lines(view)
    lines += criteria_lines(view)
    lines += judge_lines(view)
    reports = view.get("reports")
    if isinstance(reports, dict) and reports.get("assigned"):
        # Runs that never arrived: reported against assigned, per arm.
        lines.append(f"  reported   {reports.get('verdict')}: {reports.get('reason')}")
        lines += matched_lines(reports)
        lines.append(f"{'':13}{missing_policy_words(reports)}")
    previous = view.get("previous")
    if previous:
        rollback = previous["rollback"]
        lines.append(f"  rolled back by {rollback['actor']} at {clock(rollback['time'])}: "
                     f"{rollback['reason']}")
        lines.append(f"  evidence of the stage it ended ({stage_words(previous)}, "
                     f"{clock(previous['window']['since'])} to "
                     f"{clock(previous['window']['until'])}):")
        shown = SHOWN_ARMS.get(str(previous["stage"]), ("current", "candidate"))
        lines += ["  " + line for arm in shown if arm in previous["arms"]
                  for line in arm_line(arm, previous["arms"][arm])]
    what_next = (view.get("next") or {}).get("lines") or []
    for index, line in enumerate(what_next):
        lines.append(f"  {'what next' if index == 0 else '':<10} {line}")
    keeper = view.get("gatekeeper")
    if keeper:
        lines.append(f"  {'gatekeeper':<10} {keeper.get('text', keeper.get('status'))}")
    return lines


def one_line(view: dict[str, Any], binding: dict[str, Any] | None = None) -> str:
    """A role in one line: stage, the judged arm's verdict and n, and what comes next."""
    arms = view.get("arms", {})
    judged = SHOWN_ARMS.get(str(view.get("stage")), ("current",))[-1]
    figures = arms.get(judged, {})
    verdict = f"{judged} {figures.get('verdict', '-')} n={figures.get('n', 0)}"
    nxt = view.get("next") or {}
    lines = nxt.get("lines") or [nxt.get("summary", "")]
    paused = " PAUSED" if view.get("paused") else ""
    holdback = (view.get("concurrent") or {}).get("holdback")
    kept = f" holdback {holdback:g}" if view.get("stage") == "full" and holdback else ""
    if binding is not None and binding.get("bucket_by"):
        kept += f" by {binding['bucket_by']}"
    return f"{view['role']}  {stage_words(view)}{kept}{paused}  v{view['version']}  " \
        f"{verdict}  " + " / ".join(lines)


def wait_outcome(started_with: str | None, view: dict[str, Any]) -> int | None:
    """--wait's exit code once the rollout has ended, else None.

    Stable with no candidate is the end: 0 if the config now current is the
    candidate we waited on (or there was none), 1 if an older one came back.
    """
    stage = view.get("stage")
    if stage == "rolled_back":
        return WAIT_ROLLED_BACK
    if stage == "stable" and view.get("candidate") is None:
        if started_with is None or view.get("current") == started_with:
            return WAIT_STABLE
        return WAIT_ROLLED_BACK
    return None


def _draw(text: str, first: bool) -> None:
    if sys.stdout.isatty():
        click.echo(CLEAR + text)
    else:
        click.echo(("" if first else "\n") + text)


def _poll(api: ApiClient, role: str, interval: float, deadline: float | None,
          draw: Callable[[dict[str, Any]], None]) -> tuple[dict[str, Any], int] | None:
    """Read the view every `interval` and draw it.

    With a deadline (--wait): the last view and its exit code once the rollout
    ends, None when the deadline passes first. Without one (--watch alone): until
    interrupted.
    """
    started_with: str | None = None
    first = True
    while True:
        view: dict[str, Any] = api.get(gate_path(role))
        if first:
            started_with = view.get("candidate")
            first = False
        draw(view)
        if deadline is not None:
            code = wait_outcome(started_with, view)
            if code is not None:
                return view, code
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(interval, left))
        else:
            time.sleep(interval)


@click.command()
@click.argument("role", required=False)
@click.option("--watch", is_flag=True, help="Redraw as things change (Ctrl-C stops).")
@click.option("--wait", is_flag=True,
              help="Block until the rollout ends: exit 0 stable, 1 rolled back, 2 timeout.")
@click.option("--timeout", default="30m", show_default=True, callback=_duration_option,
              help="How long --wait waits (30m, 90s, 1h30m).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between reads with --watch or --wait.")
@click.option("--json", "as_json", is_flag=True, help="Print the gate view's JSON.")
@click.option("--rollouts-per-day", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="Without ROLE: the fleet's expected false rollbacks a day at this many "
                   "rollouts a day [default: the pace of the last day].")
@click.option("--fleet-budget", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="Without ROLE: the stage alpha that keeps the fleet within this many "
                   "expected false rollbacks a day, and the roles over it [default: the "
                   "router's ROLEGATE_FLEET_BUDGET, if set].")
@api_command
def status(api: ApiClient, role: str | None, watch: bool, wait: bool, timeout: float,
           interval: float, as_json: bool, rollouts_per_day: float | None,
           fleet_budget: float | None) -> None:
    """Where ROLE's rollout stands and what happens next; no ROLE: one line per role,
    then what the fleet gets (expected false rollbacks, `gatekeeper.stats.fleet`)."""
    if role is None:
        if watch or wait:
            raise click.UsageError("--watch and --wait need a ROLE")
        records = api.get("/v1/bindings?view=full")["roles"]
        roles = sorted(records)
        views = [api.get(gate_path(name)) for name in roles]
        now = views[0].get("time", time.time()) if views else time.time()
        fleet = outlook(views, now, rollouts_per_day)
        budget, source = fleet_budget, "--fleet-budget"
        if budget is None:
            budget, source = _router_budget(api), BUDGET_SOURCE
        advice = None if budget is None else budget_advice(views, fleet, budget)
        if as_json:
            echo_json({"roles": views, "fleet": {**fleet.as_dict(), **_fleet_advice(advice)}})
        for view in [] if as_json else views:
            click.echo(one_line(view, (records.get(view["role"]) or {}).get("binding")))
        if not as_json:
            keeper = views[0]["gatekeeper"] if views and "gatekeeper" in views[0] else \
                api.get("/v1/gatekeeper/heartbeat")
            click.echo(f"gatekeeper: {keeper.get('text', keeper.get('status'))}")
            click.echo(fleet.text())
            for line in [] if advice is None else advice.lines(source):
                click.echo(line)
        return
    if not (watch or wait):
        view = api.get(gate_path(role))
        if as_json:
            echo_json(view)
        else:
            click.echo("\n".join(render(view, _binding(api, role, {}, view))))
        return
    last = [""]
    read: dict[int, dict[str, Any]] = {}

    def draw(view: dict[str, Any]) -> None:
        binding = _binding(api, role, read, view)
        text = "\n".join(render(view, binding)) if watch else one_line(view, binding)
        if text == last[0]:
            return  # redraw only on a change
        if watch:
            _draw(text, first=not last[0])
        else:
            click.echo(text)
        last[0] = text

    try:
        ended = _poll(api, role, interval, time.monotonic() + timeout if wait else None, draw)
    except KeyboardInterrupt:
        return
    if ended is None:
        click.echo(f"{role}: still rolling out after {timeout:g}s", err=True)
        sys.exit(WAIT_TIMEOUT)
    view, code = ended
    word = "stable" if code == WAIT_STABLE else "rolled back"
    click.echo(f"{role}: {word} (current {view.get('current')})")
    sys.exit(code)


def _binding(api: ApiClient, role: str, read: dict[int, dict[str, Any]],
             view: dict[str, Any]) -> dict[str, Any]:
    """The role's binding at the view's version, read once per version (its bucketing is shown)."""
    version = int(view.get("version", 0))
    if version not in read:
        read.clear()
        read[version] = api.get(f"/v1/bindings/{quote(role, safe='')}")["binding"]
    return read[version]


def _fleet_advice(advice: BudgetAdvice | None) -> dict[str, Any]:
    """--json's budget figures: the stage alpha it asks for, and the roles over it."""
    if advice is None:
        return {}
    return {"budget_per_day": advice.budget_per_day, "alpha_for_budget": advice.alpha,
            "budget": advice.as_dict()}


def _router_budget(api: ApiClient) -> float | None:
    """The router's ROLEGATE_FLEET_BUDGET (GET /v1/fleet); None: none set, or an older
    router without the route."""
    try:
        budget = (api.get("/v1/fleet").get("budget") or {}).get("budget_per_day")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return float(budget) if isinstance(budget, (int, float)) else None


def register(main: click.Group) -> None:
    """Add `status` to the `rolegate` command group."""
    main.add_command(status)
