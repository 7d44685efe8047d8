"""`rolegate gatekeeper`: the autonomous rollout loop, and `gatekeeper calibrate`.

Runs as its own process (never inside gunicorn workers: N workers would be N
loops), talking to the router over HTTP with a gatekeeper-scope token.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from urllib.parse import quote

import click

from gatekeeper.alerts import EndpointError
from gatekeeper.loop import Gatekeeper, unjudged
from gatekeeper.machine.decide import Decision
from gatekeeper.webhooks import Notifier, parse_urls
from rolegate.http import ApiClient
from router.cli.common import (
    EXIT_OK,
    EXIT_REFUSED,
    api_command,
    api_errors,
    echo_json,
    token_option,
    url_option,
)
from router.server.auth import ACTOR_HEADER


def _echo(decision: Decision) -> None:
    click.echo(json.dumps(decision.as_dict(), sort_keys=True))


@click.group("gatekeeper", invoke_without_command=True)
@click.option("--once", is_flag=True, help="Run one tick and exit.")
@click.option("--dry-run", is_flag=True, help="Print decisions without acting on them.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=5.0, show_default=True,
              help="Seconds between ticks.")
@click.option("--lease-ttl", type=click.FloatRange(min=0.1), default=None,
              help="Leader lease lifetime in seconds [default: max(3 x interval, 5)].")
@click.option("--holder", default=None, help="Lease holder id [default: host:pid:random].")
@click.option("--webhook", "webhooks", multiple=True,
              help="Webhook for events, [format[.severity]=]URL with format rolegate, slack, "
                   "teams, discord or generic and severity info, warn or error (repeatable; "
                   "adds to ROLEGATE_WEBHOOKS).")
@click.option("--public-url", envvar="ROLEGATE_PUBLIC_URL", default=None,
              help="The router's URL as people reach it, for links in alerts "
                   "[env ROLEGATE_PUBLIC_URL].")
@url_option()
@token_option("Gatekeeper-scope bearer token [env ROLEGATE_TOKEN].")
@click.option("-v", "--verbose", is_flag=True, help="Log every lease and move.")
@click.pass_context
def gatekeeper(ctx: click.Context, once: bool, dry_run: bool, interval: float,
               lease_ttl: float | None, holder: str | None, webhooks: tuple[str, ...],
               public_url: str | None, url: str, token: str | None, verbose: bool) -> None:
    """Promote healthy candidates stage by stage and roll bad ones back, unattended."""
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    urls = parse_urls([os.environ.get("ROLEGATE_WEBHOOKS", ""), *webhooks])
    try:
        notifier = Notifier(urls, public_url=public_url)
    except EndpointError as exc:
        raise click.BadParameter(str(exc), param_hint="--webhook / ROLEGATE_WEBHOOKS") from None
    api = ApiClient(url, token)
    # On an open router (no tokens) this is how its moves are recorded as the gatekeeper's.
    api.session.headers[ACTOR_HEADER] = "gatekeeper"
    keeper = Gatekeeper(api, interval=interval, lease_ttl=lease_ttl, holder=holder,
                        dry_run=dry_run, notifier=notifier,
                        echo=_echo if (once or dry_run or verbose) else None)
    try:
        with api_errors(url):
            if once:
                try:
                    decisions = keeper.once()
                finally:
                    keeper.release()
                if keeper.ticks == 0:
                    click.echo("another gatekeeper holds the lease; nothing done", err=True)
                failed = unjudged(decisions)
                if failed:
                    # Exit 1, not 0: a tick that judged nothing must not look like a quiet one.
                    click.echo(f"could not judge {len(failed)} role(s), their gate view "
                               f"failed: {', '.join(failed)}", err=True)
                    sys.exit(EXIT_REFUSED)
                return
            keeper.install_signal_handlers()
            keeper.run()
    finally:
        notifier.close()
        api.close()
    sys.exit(EXIT_OK)


@gatekeeper.command("calibrate")
@click.argument("role")
@click.option("--config", "config", required=True, help="The config whose runs are known-good.")
@click.option("--arm", type=click.Choice(["current", "candidate", "shadow"]), default="current",
              show_default=True, help="Which arm's stored runs to replay.")
@click.option("--metric", type=click.Choice(["run_failure", "tool_error", "forbidden_call"]),
              default="run_failure", show_default=True)
@click.option("--h", "hs", type=click.FloatRange(min=0.0, min_open=True), multiple=True,
              required=True, help="A threshold to try (repeatable).")
@click.option("--shift", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
              default=None, help="p1 - p0 [default: the role's drift.shift].")
@click.option("--p0", type=click.FloatRange(0.0, 1.0), default=None,
              help="Baseline rate [default: the replayed runs' own rate].")
@click.option("--runs", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Newest stored runs to replay.")
@api_command
def calibrate(api: ApiClient, role: str, config: str, arm: str, metric: str,
              hs: tuple[float, ...], shift: float | None, p0: float | None, runs: int) -> None:
    """Replay ROLE's stored known-good runs through a detector; report false alarms per h."""
    params: list[tuple[str, str | float | int]] = [("config", config), ("arm", arm),
                                                   ("metric", metric), ("runs", runs)]
    params += [("h", h) for h in hs]
    if shift is not None:
        params.append(("shift", shift))
    if p0 is not None:
        params.append(("p0", p0))
    result = api.get(f"/v1/roles/{quote(role, safe='')}/drift/calibrate", params=params)
    echo_json(result)


def register(main: click.Group) -> None:
    """Add `gatekeeper` (and `gatekeeper calibrate`) to the CLI."""
    main.add_command(gatekeeper)
