"""`rolegate export-otlp`: send every stored run to an OTLP/HTTP collector as a span.

A process of its own, reading Redis directly (like the router, with its
REDIS_URL / REDIS_SENTINELS): `rolegate serve` starts one beside its workers
when ROLEGATE_EXPORT_OTLP_ENDPOINT is set, and one may run anywhere else
(a sidecar) with the same variables. Several may run: one holds the export lease
and exports, the others wait to take over (`gatekeeper.export.exporter`).
"""

from __future__ import annotations

import logging
import signal
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import click

from bindings.connection import connect
from gatekeeper.export.exporter import DEFAULT_BATCH, DEFAULT_INTERVAL_S, OtlpExporter
from gatekeeper.export.otlp_send import OtlpSender, parse_headers
from router.server.settings import load_settings


@click.command("export-otlp")
@click.option("--endpoint", envvar="ROLEGATE_EXPORT_OTLP_ENDPOINT", default="",
              help="The collector's OTLP/HTTP URL (base, or ending in /v1/traces) "
                   "[env ROLEGATE_EXPORT_OTLP_ENDPOINT].")
@click.option("--batch", type=click.IntRange(1, 10_000), default=DEFAULT_BATCH,
              show_default=True, help="Most runs in one export request.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=DEFAULT_INTERVAL_S,
              show_default=True, help="Seconds between looks for new runs when idle.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds one export request may take before it is retried.")
@click.option("--gzip", "compress", is_flag=True, help="Send gzip-compressed bodies.")
@click.option("--holder", default=None,
              help="Export lease holder id [default: host:pid:random].")
def export_otlp(endpoint: str, batch: int, interval: float, timeout: float,
                compress: bool, holder: str | None) -> None:
    """Export every stored run to an OTLP collector as a span, until stopped."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = load_settings({"export_otlp_endpoint": endpoint} if endpoint else None)
        headers = parse_headers(settings.export_otlp_headers)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if not settings.export_otlp_endpoint:
        raise click.UsageError("no collector: pass --endpoint or set "
                               "ROLEGATE_EXPORT_OTLP_ENDPOINT")
    sender = OtlpSender(settings.export_otlp_endpoint, headers, timeout_s=timeout,
                        compress=compress)
    connection = connect(settings.redis_target())
    exporter = OtlpExporter(connection, sender, holder=holder, batch=batch, interval_s=interval,
                            lease_ttl_s=max(30.0, 3 * timeout), version=_version())

    def stopping(signum: int, frame: Any) -> None:
        exporter.stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    logging.getLogger("rolegate.export").info("exporting stored runs to %s", sender.url)
    try:
        exporter.run()
    finally:
        sender.close()
        connection.close()


def _version() -> str:
    try:
        return version("rolegate")
    except PackageNotFoundError:
        return ""


def register(main: click.Group) -> None:
    """Add `export-otlp` to the CLI."""
    main.add_command(export_otlp)
