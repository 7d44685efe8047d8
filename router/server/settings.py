"""The router's settings: defaults, then the environment, then a test's overrides.

Validated once into a pydantic model, so a bad value stops the boot with a
message naming it instead of failing on the first request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bindings.connection import RedisTarget, parse_sentinels

#: Environment variable -> settings field. The names are a contract with operators.
ENVIRONMENT = {
    "REDIS_URL": "redis_url",
    "REDIS_SENTINELS": "redis_sentinels",
    "REDIS_SENTINEL_MASTER": "redis_sentinel_master",
    "ROLEGATE_MIN_REPLICAS": "min_replicas",
    "ROLEGATE_REPLICA_WAIT_MS": "replica_wait_ms",
    "ROLEGATE_FULL_RELOAD_INTERVAL": "full_reload_interval_s",
    "ROLEGATE_HEALTH_HOLD": "health_hold_s",
    "ROLEGATE_RUN_ID_TTL": "run_id_ttl_s",
    "ROLEGATE_TOKENS": "tokens",
    "ROLEGATE_REFRESH_INTERVAL": "refresh_interval_s",
    "ROLEGATE_MAX_BODY_BYTES": "max_body_bytes",
    "ROLEGATE_TRACE_RETENTION": "trace_retention",
    "ROLEGATE_WEBHOOKS": "webhooks",
    "ROLEGATE_DATA_DIR": "data_dir",
    "ROLEGATE_LOG_RESOLVES": "log_resolves",
    "ROLEGATE_LOG_SAMPLE": "log_sample",
    "ROLEGATE_LOG_LEVEL": "log_level",
    "ROLEGATE_TOKENS_FILE": "tokens_file",
    "ROLEGATE_ALLOWED_HOSTS": "allowed_hosts",
    "ROLEGATE_INGEST_QUOTA": "ingest_quota",
    "ROLEGATE_FLEET_BUDGET": "fleet_budget",
    "ROLEGATE_CORS_ORIGINS": "cors_origins",
    "ROLEGATE_EXPORT_OTLP_ENDPOINT": "export_otlp_endpoint",
    "ROLEGATE_EXPORT_OTLP_HEADERS": "export_otlp_headers",
    "ROLEGATE_BUCKETING": "bucketing",
}


class Settings(BaseModel):
    """Everything the router reads at boot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str = "redis://127.0.0.1:6379/0"
    #: "host:port,host:port": connect through these Sentinels instead of redis_url.
    redis_sentinels: str = ""
    #: The name the Sentinels monitor (required with redis_sentinels).
    redis_sentinel_master: str = ""
    #: A binding change is answered only once this many replicas confirm it (WAIT).
    min_replicas: int = Field(0, ge=0, le=16)
    #: How long a binding change waits for those replicas (under the 2 s socket timeout).
    replica_wait_ms: int = Field(1000, ge=1, le=1500)
    #: Each worker reloads the whole table this often whatever the change hint says.
    full_reload_interval_s: float = Field(5.0, gt=0.0, le=300.0)
    #: /healthz stays degraded this long after Redis last refused a write (0: no hold).
    health_hold_s: float = Field(15.0, ge=0.0, le=3600.0)
    #: "token:scope,token:scope" (a token may be named: "alice=token:operator").
    #: None runs the server open, which it announces loudly.
    tokens: str | None = None
    #: A file of `name=sha256:<hex>:scope[:roles]` lines, re-read when it changes.
    tokens_file: str | None = None
    #: Host names served besides the bound address and loopback (comma-separated; `*`: any).
    allowed_hosts: str = ""
    #: Origins whose browser pages may resolve and evaluate OFREP (comma-separated
    #: scheme://host[:port]; `router.server.cors`). Empty: no CORS answers.
    cors_origins: str = ""
    #: The bucketing a rollout that begins gets (docs/bucketing.md): 2, XXH3 with a salt of
    #: its own; 1, BLAKE2b unsalted, as every SDK before bucketing versions routes (keep it
    #: while such SDKs resolve in process; rollouts already running keep theirs either way).
    bucketing: int = Field(2, ge=1, le=2)
    #: Per token per second: "traces=N,bytes=M" (0 turns a limit off).
    ingest_quota: str = ""
    #: How often each worker polls the change counter; a change shows within it.
    refresh_interval_s: float = Field(0.2, gt=0.0, le=1.0)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    #: Traces kept per (role, config, arm).
    trace_retention: int = Field(100_000, ge=1)
    #: How long a run id stays known (a retry within it is never counted twice). Each
    #: costs about 200 bytes of Redis memory for this long: the sizing in docs/scaling.md.
    run_id_ttl_s: int = Field(7 * 24 * 3600, ge=60)
    #: Comma-separated webhook URLs that receive rollout events.
    webhooks: str = ""
    data_dir: str = ".rolegate"
    #: Log resolves (their request and decision lines) too; 0 keeps the hot path quiet.
    log_resolves: bool = True
    #: The share of resolves and OFREP evaluations that write their two lines (docs/operations.md):
    #: 1 in 100 by default, so 122,000 evaluations write ~2,440 lines, not 244,000. Every
    #: warning, error and state change (binding writes, rollbacks, restores) is always written.
    log_sample: float = Field(0.01, ge=0.0, le=1.0, allow_inf_nan=False)
    #: The lowest level the router's JSON lines are written at: request lines are `info`,
    #: state changes and failures `warning`, so `warning` keeps only those.
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    testing: bool = False
    #: An OTLP/HTTP collector that gets every stored run as a span (`rolegate export-otlp`,
    #: which `rolegate serve` starts when this is set); its base URL or its /v1/traces URL.
    export_otlp_endpoint: str = ""
    #: Headers sent with each export, `name=value,...` (values URL-encoded), as
    #: OTEL_EXPORTER_OTLP_HEADERS: a collector's credentials.
    export_otlp_headers: str = ""
    #: Expected false rollbacks a day the team accepts across the roles served: shown
    #: with the alpha it asks of each rollout and the roles over it (advice, never
    #: applied: `gatekeeper.stats.fleet_budget`). None: no budget.
    fleet_budget: float | None = Field(None, gt=0.0, le=1e6, allow_inf_nan=False)

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_lowercase(cls, value: Any) -> Any:
        # gunicorn reads the same variable and takes any case.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels_parse(cls, value: str) -> str:
        parse_sentinels(value)  # a ValueError names the bad address
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins_parse(cls, value: str) -> str:
        if value.strip():
            parse_origins(value)  # a ValueError names the bad origin
        return value

    @field_validator("export_otlp_endpoint")
    @classmethod
    def _endpoint_url(cls, value: str) -> str:
        value = value.strip()
        if value:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"ROLEGATE_EXPORT_OTLP_ENDPOINT must be an http(s) URL, "
                                 f"not {value!r}")
        return value

    @field_validator("export_otlp_headers")
    @classmethod
    def _headers_parse(cls, value: str) -> str:
        from gatekeeper.export.otlp_send import parse_headers

        parse_headers(value)  # a ValueError names the bad pair
        return value

    @model_validator(mode="after")
    def _sentinel_master_named(self) -> Settings:
        if self.redis_sentinels and not self.redis_sentinel_master:
            raise ValueError("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER "
                             "(the name the Sentinels monitor) is not")
        return self

    def redis_target(self) -> RedisTarget:
        """Where Redis is: the URL, or the Sentinels and their master's name."""
        return RedisTarget(url=self.redis_url, sentinels=parse_sentinels(self.redis_sentinels),
                           sentinel_master=self.redis_sentinel_master or None)


def load_settings(test_config: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Merge defaults, the environment and `test_config`, and validate the result."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for variable, field in ENVIRONMENT.items():
        if variable in env and env[variable] != "":
            values[field] = env[variable]
    values.update(test_config or {})
    return Settings.model_validate(values)


def parse_origins(spec: str) -> frozenset[str]:
    """ROLEGATE_CORS_ORIGINS -> origins as browsers send them; ValueError naming a bad one.

    Here, not in `router.server.cors`: the settings check it as they load, and load without
    Flask (the CLI reads them).
    """
    origins = set()
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        parts = urlsplit(item)
        if (parts.scheme not in ("http", "https") or not parts.netloc
                or parts.path not in ("", "/") or parts.query or parts.fragment
                or "@" in parts.netloc):
            raise ValueError(f"ROLEGATE_CORS_ORIGINS: {item!r} is not an origin; give "
                             "scheme://host[:port], e.g. https://app.example.com")
        origins.add(f"{parts.scheme}://{parts.netloc}".lower())
    return frozenset(origins)
