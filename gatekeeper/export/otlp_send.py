"""POST one OTLP/HTTP protobuf batch and say what to do with it: done, retry, or drop.

Hand-written on requests rather than `opentelemetry-exporter-otlp-proto-http`'s
`OTLPSpanExporter`: that exporter takes SDK spans and answers only SUCCESS or
FAILURE once its own retries are spent, so it cannot tell a collector that is
down (keep the runs in Redis and try again, however long) from one that refused
the data (drop it, counted), nor report `partialSuccess` or `Retry-After` to us.
The retry rules are OTLP/HTTP's: 429, 502, 503 and 504 are retried (honouring
`Retry-After`), 400 means the data is bad. Unlike the spec we also retry other
answers (401, 403, 404, 500, a refused connection): they say the endpoint or
its credentials are wrong, not the runs, and dropping every run while an
operator fixes a header would lose them for good.
"""

from __future__ import annotations

import gzip
import random
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

import requests
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from rolegate.http import retry_after

#: Longest wait between two tries of one batch (a Retry-After above it is cut to it).
MAX_BACKOFF_S = 30.0
FIRST_BACKOFF_S = 0.5
#: The path OTLP/HTTP collectors serve traces on, appended to a base endpoint.
TRACES_PATH = "/v1/traces"

Verdict = Literal["ok", "retry", "reject", "too_large"]


@dataclass(frozen=True)
class Outcome:
    """What one POST came to."""

    verdict: Verdict
    #: Spans the collector took but refused (`partialSuccess.rejectedSpans`): drops.
    rejected: int = 0
    #: Seconds the collector asked to wait (429/503 Retry-After).
    wait_s: float | None = None
    message: str = ""


def traces_url(endpoint: str) -> str:
    """The URL to POST to: `endpoint` as given when it ends in /v1/traces, else with it appended.

    Like OTEL_EXPORTER_OTLP_ENDPOINT: a collector's base URL (`http://collector:4318`,
    Langfuse's `.../api/public/otel`) gets the traces path added.
    """
    base = endpoint.rstrip("/")
    return base if urlsplit(base).path.endswith(TRACES_PATH) else base + TRACES_PATH


def parse_headers(raw: str) -> dict[str, str]:
    """`k=v,k2=v2` (values URL-encoded, as OTEL_EXPORTER_OTLP_HEADERS) as a dict.

    ValueError naming the bad pair for anything else.
    """
    headers: dict[str, str] = {}
    for pair in (p.strip() for p in raw.split(",")):
        if not pair:
            continue
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name or any(c in name for c in " \t:\r\n"):
            raise ValueError(f"ROLEGATE_EXPORT_OTLP_HEADERS: {pair!r} is not name=value")
        text = unquote(value.strip())
        if any(c in text for c in "\r\n"):
            raise ValueError(f"ROLEGATE_EXPORT_OTLP_HEADERS: the value of {name!r} has a line break")
        headers[name] = text
    return headers


def backoff(attempt: int, asked: float | None, rng: random.Random | None = None) -> float:
    """Seconds before try `attempt + 1` of a batch: what the collector asked, else doubling.

    Jittered by up to a quarter so several routers' exporters do not come back in step.
    """
    if asked is not None:
        return min(max(asked, 0.0), MAX_BACKOFF_S)
    base = min(FIRST_BACKOFF_S * 2.0 ** min(attempt, 16), MAX_BACKOFF_S)
    jitter = rng.random() if rng is not None else random.random()
    return base * (0.75 + 0.25 * jitter)


def classify(status: int, body: bytes, content_type: str, wait_s: float | None) -> Outcome:
    """An answer's outcome by OTLP/HTTP's rules (and ours for answers about the endpoint)."""
    if 200 <= status < 300:
        return Outcome("ok", rejected=_rejected(body, content_type))
    if status == 413:
        return Outcome("too_large", message="413 payload too large")
    if status == 400:
        return Outcome("reject", message=f"400 {_text(body)}")
    return Outcome("retry", wait_s=wait_s if status in (429, 503) else None,
                   message=f"{status} {_text(body)}")


class OtlpSender:
    """Posts protobuf ExportTraceServiceRequests to one collector."""

    def __init__(self, endpoint: str, headers: dict[str, str] | None = None, *,
                 timeout_s: float = 10.0, compress: bool = False) -> None:
        self.url = traces_url(endpoint)
        self.timeout_s = timeout_s
        self.compress = compress
        self.session = requests.Session()
        self.session.headers.update({"Content-Type": "application/x-protobuf",
                                     **({"Content-Encoding": "gzip"} if compress else {}),
                                     **(headers or {})})

    def send(self, body: bytes) -> Outcome:
        """POST `body` once; a connection failure or timeout is a retry."""
        data = gzip.compress(body, compresslevel=5) if self.compress else body
        try:
            with self.session.post(self.url, data=data, timeout=self.timeout_s) as response:
                return classify(response.status_code, response.content,
                                response.headers.get("Content-Type", ""), retry_after(response))
        except requests.RequestException as exc:
            return Outcome("retry", message=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Close the connection pool."""
        self.session.close()


def _rejected(body: bytes, content_type: str) -> int:
    if not body or "protobuf" not in content_type:
        return 0  # JSON answers and empty bodies: nothing we can count
    answer = ExportTraceServiceResponse()
    try:
        answer.ParseFromString(body)
    except DecodeError:
        return 0
    return int(answer.partial_success.rejected_spans)


def _text(body: bytes) -> str:
    return body[:200].decode("utf-8", "replace").strip()
