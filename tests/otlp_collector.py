"""A loopback OTLP/HTTP trace collector for tests and benches: it decodes what it is sent.

Each POST body (gzip allowed) is parsed as a protobuf ExportTraceServiceRequest
with the OpenTelemetry project's own classes. It can be told to answer the next
requests with scripted statuses (503, 429 with Retry-After, ...), to refuse
requests a function picks, or to hang until released; spans are kept only from
requests it answered 200.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class Collector:
    """What the loopback collector received and how it answers."""

    def __init__(self) -> None:
        self.url = ""
        self.spans: list[Span] = []
        self.resources: list[dict[str, Any]] = []
        #: Every request seen, answered or not (a hung one included).
        self.requests = 0
        #: (status, headers) for the next requests, one each, before answering 200.
        self.script: list[tuple[int, dict[str, str]]] = []
        #: A status to refuse a request with (None: take it).
        self.refuse: Callable[[ExportTraceServiceRequest], int | None] = lambda request: None
        #: Cleared: requests wait until it is set, then get a 503 (nothing kept).
        self.flowing = threading.Event()
        self.flowing.set()
        self.lock = threading.Lock()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Decode one request and decide its answer."""
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.lock:
            self.requests += 1
        if not self.flowing.is_set():
            self.flowing.wait(60)
            return 503, {}, b""
        with self.lock:
            if self.script:
                status, headers = self.script.pop(0)
                return status, headers, b""
        refused = self.refuse(request)
        if refused is not None:
            return refused, {}, b"refused"
        with self.lock:
            for resource_spans in request.resource_spans:
                self.resources.append(attributes(resource_spans.resource.attributes))
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)
        return 200, {"Content-Type": "application/x-protobuf"}, \
            ExportTraceServiceResponse().SerializeToString()

    def count(self) -> int:
        """Spans kept so far."""
        with self.lock:
            return len(self.spans)


def attributes(pairs: Any) -> dict[str, Any]:
    """OTLP attributes as a plain dict (arrays as lists)."""
    return {pair.key: value(pair.value) for pair in pairs}


def value(any_value: AnyValue) -> Any:
    """One OTLP AnyValue as a Python value."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


@contextmanager
def collector() -> Iterator[Collector]:
    """Serve a Collector on a free loopback port; its `url` is the base to export to."""
    state = Collector()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            headers: dict[str, str]
            if self.path != "/v1/traces":
                status, headers, out = 404, {}, b"no such path"
            else:
                status, headers, out = state.answer(body)
            try:
                self.send_response(status)
                for name, text in headers.items():
                    self.send_header(name, text)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the exporter gave up waiting (a hung request): nothing to answer

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        state.flowing.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
