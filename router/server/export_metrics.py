"""The OTLP exporter's lag and drops as Prometheus metrics, read from Redis at scrape time.

The exporter runs in its own process (`rolegate export-otlp`), perhaps on another
router's host: what it did is in Redis (`gatekeeper.store.export_cursor`), so any
worker of any router answers a scrape with the same numbers. The lag is measured
against the streams themselves, so it keeps growing while no exporter runs at
all, which is when an alert on it matters.
"""

from __future__ import annotations

from collections.abc import Iterator

from flask import Flask
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bindings.errors import RolegateError
from bindings.lease import LeaseStore
from gatekeeper.export.exporter import LEASE_NAME
from gatekeeper.store.export_cursor import ExportCursors
from router.server.services import services_of

#: Why runs were dropped (the `reason` label): trimmed past the retention unexported,
#: refused by the collector (400, or partialSuccess), too large alone (413), unreadable.
DROP_REASONS = ("trimmed", "rejected", "too_large", "unreadable")


class ExportCollector(Collector):
    """Per role lag (runs, seconds), and the export's totals, drops by reason."""

    def __init__(self, app: Flask) -> None:
        services = services_of(app)
        self.cache = services.cache
        self.cursors = ExportCursors(services.redis)
        self.leases = LeaseStore(services.redis, LEASE_NAME)

    def collect(self) -> Iterator[Metric]:
        """Yield the export metrics; nothing when Redis cannot be read."""
        try:
            roles = sorted(self.cache.all()[0])
            states = {role: self.cursors.role_state(role) for role in roles}
            totals = self.cursors.totals()
            holder = self.leases.state().holder
        except RolegateError:
            return
        runs = GaugeMetricFamily("rolegate_otlp_export_lag_runs",
                                 "Stored runs of the role not yet exported.", labels=["role"])
        seconds = GaugeMetricFamily("rolegate_otlp_export_lag_seconds",
                                    "How long the role's oldest unexported run has waited "
                                    "(0 when none waits).", labels=["role"])
        for role, state in states.items():
            runs.add_metric([role], float(sum(s.lag for s in state.streams)))
            seconds.add_metric([role], state.lag_seconds())
        yield runs
        yield seconds
        dropped = CounterMetricFamily("rolegate_otlp_export_dropped",
                                      "Runs that will never be exported, by reason.",
                                      labels=["reason"])
        for reason in DROP_REASONS:
            dropped.add_metric([reason], float(totals.get(f"dropped:{reason}", 0)))
        yield dropped
        yield CounterMetricFamily("rolegate_otlp_export_spans",
                                  "Runs the collector took, one span each.",
                                  value=float(totals.get("exported", 0)))
        yield CounterMetricFamily("rolegate_otlp_export_retries",
                                  "Export requests tried again (collector down, 429, 5xx).",
                                  value=float(totals.get("retries", 0)))
        if "last_success" in totals:
            yield GaugeMetricFamily("rolegate_otlp_export_last_success_timestamp_seconds",
                                    "Unix time of the last export the collector took.",
                                    value=float(totals["last_success"]))
        yield GaugeMetricFamily("rolegate_otlp_export_up",
                                "1 while an exporter holds the export lease.",
                                value=1.0 if holder else 0.0)
