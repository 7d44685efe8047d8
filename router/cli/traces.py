"""`rolegate traces`: report traces from a file and watch a role's traces arrive.

    rolegate traces post FILE|-        one trace, a list, or {"traces": [...]} (- reads stdin)
    rolegate traces show RUN_ID [--role R]
    rolegate traces tail ROLE [--config C] [--arm A] [-n N] [--once] [--json]

`post` sends the file as it is to `POST /v1/traces` (batches of at most
`--batch` traces, halved when the router finds one too large) and prints each
refusal; exit 1 when any trace was refused.
`tail` prints the role's newest traces, then polls for new ones until
interrupted (`--once`: print and stop).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any
from urllib.parse import quote

import click

from rolegate.http import ApiClient, ApiError
from router.cli.common import EXIT_REFUSED, api_command, echo_json

#: Traces per POST: far under the router's batch and body limits for ordinary traces.
DEFAULT_BATCH = 500


def _items(raw: Any) -> list[Any]:
    if isinstance(raw, list):
        return raw
    if isinstance(raw, dict) and set(raw) == {"traces"} and isinstance(raw["traces"], list):
        return list(raw["traces"])
    if isinstance(raw, dict):
        return [raw]
    raise click.BadParameter('expected a trace, a list of traces, or {"traces": [...]}')


def _post(api: ApiClient, batch: list[Any]) -> dict[str, Any]:
    try:
        answer: dict[str, Any] = api.post("/v1/traces", {"traces": batch}, ok=(200, 207))
    except ApiError as exc:
        if exc.status != 422:
            raise
        # Every trace of the batch refused: the body still lists each reason.
        refused = exc.details.get("refused", []) if isinstance(exc.details, dict) else []
        answer = {"accepted": 0, "duplicates": 0, "refused": len(batch), "tripwire": [],
                  "results": [{"index": r.get("index"), "status": "refused",
                               "error": {"message": r.get("reason")}} for r in refused]}
    return answer


def _post_split(api: ApiClient, batch: list[Any], start: int) -> list[tuple[int, dict[str, Any]]]:
    """POST `batch`; when the router finds the body too large (413), each half on its own.

    Returns (index of the part's first trace, answer) per request sent.
    """
    try:
        return [(start, _post(api, batch))]
    except ApiError as exc:
        if exc.status != 413 or len(batch) == 1:
            raise
    half = len(batch) // 2
    return (_post_split(api, batch[:half], start)
            + _post_split(api, batch[half:], start + half))


def line(entry: dict[str, Any]) -> str:
    """One stored trace as a line: arrival, run id, arm/config, verdict, tools."""
    trace, verdict = entry["trace"], entry["verdict"]
    when = time.strftime("%H:%M:%S", time.localtime(entry["received"]))
    outcome = "pass" if verdict.get("passed") else "FAIL " + ",".join(
        verdict.get("failed", []))
    error = trace.get("error")
    failure = f" error={error['type']}" if isinstance(error, dict) else ""
    return (f"{when} {trace['run_id']} {trace['arm']}/{trace['config']} {outcome} "
            f"steps={trace.get('step_count', 0)} tools={' '.join(trace.get('tools', []))}"
            f"{failure}")


@click.group()
def traces() -> None:
    """Report traces and read them back."""


@traces.command("post")
@click.argument("source", type=click.File("r"))
@click.option("--batch", type=click.IntRange(1, 10_000), default=DEFAULT_BATCH,
              show_default=True, help="Traces per request.")
@api_command
def post(api: ApiClient, source: Any, batch: int) -> None:
    """Report the traces in SOURCE (a JSON file, or - for stdin) to POST /v1/traces."""
    try:
        items = _items(json.load(source))
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="SOURCE") from None
    if not items:
        raise click.BadParameter("no traces in it", param_hint="SOURCE")
    totals = {"accepted": 0, "duplicates": 0, "refused": 0}
    answers = [part for first in range(0, len(items), batch)
               for part in _post_split(api, items[first:first + batch], first)]
    for start, answer in answers:
        for name in totals:
            totals[name] += int(answer.get(name, 0))
        for result in answer.get("results", []):
            if result.get("status") == "refused":
                index = start + int(result.get("index") or 0)
                item = items[index] if index < len(items) else None
                run_id = result.get("run_id") or (
                    item.get("run_id", "") if isinstance(item, dict) else "")
                click.echo(f"refused #{index} {run_id}: {result['error'].get('message')}",
                           err=True)
        for trip in answer.get("tripwire", []):
            click.echo(f"tripwire: {trip['role']} rolled back by run {trip['run_id']} "
                       f"({', '.join(trip.get('tools', []))})")
    click.echo(f"{len(items)} traces: {totals['accepted']} accepted, "
               f"{totals['duplicates']} duplicates, {totals['refused']} refused")
    if totals["refused"]:
        sys.exit(EXIT_REFUSED)


@traces.command("show")
@click.argument("run_id")
@click.option("--role", default=None, help="The role, when two roles know RUN_ID.")
@api_command
def show(api: ApiClient, run_id: str, role: str | None) -> None:
    """Print one stored trace with its verdict (GET /v1/traces/RUN_ID)."""
    params = {"role": role} if role else {}
    echo_json(api.get(f"/v1/traces/{quote(run_id, safe='')}", params=params))


@traces.command("tail")
@click.argument("role")
@click.option("--config", default=None, help="Only this config (default: current and candidate).")
@click.option("--arm", type=click.Choice(["current", "candidate", "shadow"]), default=None)
@click.option("-n", "--lines", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="How many of the newest traces to print first.")
@click.option("--interval", type=click.FloatRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Print the newest traces and stop.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@api_command
def tail(api: ApiClient, role: str, config: str | None, arm: str | None, lines: int,
         interval: float, once: bool, as_json: bool) -> None:
    """Print ROLE's newest traces, then each new one as it arrives (Ctrl-C stops)."""
    path = f"/v1/roles/{quote(role, safe='')}/traces"
    params: dict[str, Any] = {"limit": lines}
    if config:
        params["config"] = config
    if arm:
        params["arm"] = arm
    seen: set[tuple[str, str, str]] = set()
    try:
        while True:
            answer = api.get(path, params=params)
            for entry in answer["traces"]:
                ident = (entry["id"], entry["trace"]["config"], entry["trace"]["arm"])
                if ident in seen:
                    continue
                seen.add(ident)
                click.echo(json.dumps(entry, sort_keys=True) if as_json else line(entry))
            if once:
                return
            last = answer.get("last_id")
            if last:
                params.update(since_id=last, limit=1000)
                # Only entries at the cursor can come back (it is inclusive): forget older ones.
                seen = {ident for ident in seen if ident[0] == last}
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def register(main: click.Group) -> None:
    """Add the `traces` group to the CLI."""
    main.add_command(traces)
