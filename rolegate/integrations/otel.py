"""rolegate for OpenTelemetry: report runs from GenAI spans in-process, no collector needed.

    from opentelemetry.sdk.trace import TracerProvider
    from rolegate.integrations.otel import SpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor(client))

Frameworks that emit the GenAI semantic conventions (`invoke_agent`,
`execute_tool`, `chat` spans) then report one trace per run: the processor keeps
each trace id's finished spans in memory and, when the root span ends, builds
the trace with `rolegate.spans.assemble` (the same function the router's OTLP
ingest uses) and hands it to `client.report`. The root span (or the resource)
says where the run belongs: `rolegate.role`, `rolegate.config`, `rolegate.arm`,
`rolegate.key`; `placement_attributes(resolution)` gives them for a resolution.

`PlacementPropagator` copies those attributes from a parent span onto each child
as it starts. Add it before an OTLP exporter so every span names its run, and
the router can trip the wire on a forbidden `execute_tool` span when that span
arrives instead of when the run ends.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import SpanProcessor as SdkSpanProcessor
from opentelemetry.trace import StatusCode
from pydantic import ValidationError

from rolegate.spans import (
    ARM,
    ATTRIBUTE_PREFIX,
    CONFIG,
    KEY,
    PLACEMENT,
    ROLE,
    RULE,
    IncompleteRun,
    Span,
    assemble,
)
from rolegate.trace import Trace

log = logging.getLogger("rolegate.otel")


def placement_attributes(resolution: Mapping[str, Any]) -> dict[str, str]:
    """The root-span attributes that place a run under `resolution` (role, config, arm, key),
    and what decided its arm: the rule and the job's attributes (`rolegate.attr.<name>`; the
    unit of a role bucketed by an attribute, which the gate's analysis reads)."""
    out = {ROLE: str(resolution["role"]), CONFIG: str(resolution["config"]),
           ARM: str(resolution["arm"]), KEY: str(resolution.get("key", ""))}
    if resolution.get("rule"):
        out[RULE] = str(resolution["rule"])
    for name, value in (resolution.get("attributes") or {}).items():
        out[ATTRIBUTE_PREFIX + name] = str(value)
    return out


class PlacementPropagator(SdkSpanProcessor):
    """Copy `rolegate.*` placement attributes from a parent span onto each child as it starts."""

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        """Give the starting span its parent's placement attributes it does not set itself."""
        parent = trace_api.get_current_span(parent_context)
        attributes = getattr(parent, "attributes", None)
        if not attributes:
            return
        for name in PLACEMENT:
            value = attributes.get(name)
            if value is not None and (span.attributes is None or name not in span.attributes):
                span.set_attribute(name, value)
        for name, value in attributes.items():
            if (name == RULE or name.startswith(ATTRIBUTE_PREFIX)) and (
                    span.attributes is None or name not in span.attributes):
                span.set_attribute(name, value)


class SpanProcessor(PlacementPropagator):
    """Assemble each finished run's spans into a trace and report it through a rolegate client.

    At most `max_runs` runs are held at once (the oldest is dropped, and counted,
    when another starts) and at most `max_spans` spans per run.
    """

    def __init__(self, client: Any, *, max_runs: int = 1000, max_spans: int = 5000) -> None:
        self.client = client
        self.max_runs = max_runs
        self.max_spans = max_spans
        self.dropped = 0
        self.refused = 0
        self._runs: OrderedDict[str, list[Span]] = OrderedDict()
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        """Keep the span; when it is a root span, report its run."""
        record = to_span(span)
        with self._lock:
            spans = self._runs.get(record.trace_id)
            if spans is None:
                if len(self._runs) >= self.max_runs:
                    self._runs.popitem(last=False)
                    self.dropped += 1
                spans = self._runs[record.trace_id] = []
            if len(spans) < self.max_spans:
                spans.append(record)
            if record.parent_id:
                return
            del self._runs[record.trace_id]
        self._report(spans)

    def _report(self, spans: list[Span]) -> None:
        try:
            trace = Trace.model_validate(assemble(spans))
        except (IncompleteRun, ValidationError) as exc:
            # A span processor must not raise into the instrumented code.
            self.refused += 1
            log.warning("rolegate: a finished run's spans make no valid trace: %s", exc)
            return
        self.client.report(trace)

    def shutdown(self) -> None:
        """Forget runs still open (their roots never ended)."""
        with self._lock:
            self._runs.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send every reported trace now (the client's flush)."""
        return bool(self.client.flush(timeout_millis / 1000))


def to_span(span: ReadableSpan) -> Span:
    """An OpenTelemetry SDK span as a `rolegate.spans.Span` (a remote parent counts as none)."""
    context = span.get_span_context()
    parent = span.parent
    return Span(
        trace_id=format(context.trace_id if context else 0, "032x"),
        span_id=format(context.span_id if context else 0, "016x"),
        parent_id=format(parent.span_id, "016x") if parent and not parent.is_remote else None,
        name=span.name, start_ns=span.start_time or 0, end_ns=span.end_time or 0,
        attributes=dict(span.attributes or {}),
        error=span.status.status_code is StatusCode.ERROR,
        status_message=span.status.description or "",
        resource=dict(span.resource.attributes) if span.resource else {})
