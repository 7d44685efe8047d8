"""The router's settings: defaults, then the environment, then a test's overrides.

Validated once into a pydantic model, so a bad value stops the boot with a
message naming it instead of failing on the first request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Environment variable -> settings field. The names are a contract with operators.
ENVIRONMENT = {
    "REDIS_URL": "redis_url",
    "ROLEGATE_TOKENS": "tokens",
    "ROLEGATE_REFRESH_INTERVAL": "refresh_interval_s",
    "ROLEGATE_MAX_BODY_BYTES": "max_body_bytes",
    "ROLEGATE_TRACE_RETENTION": "trace_retention",
    "ROLEGATE_WEBHOOKS": "webhooks",
    "ROLEGATE_DATA_DIR": "data_dir",
    "ROLEGATE_LOG_RESOLVES": "log_resolves",
}


class Settings(BaseModel):
    """Everything the router reads at boot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str = "redis://127.0.0.1:6379/0"
    #: "token:scope,token:scope" (a token may be named: "alice=token:operator").
    #: None runs the server open, which it announces loudly.
    tokens: str | None = None
    #: How often each worker polls the change counter; a change shows within it.
    refresh_interval_s: float = Field(0.2, gt=0.0, le=1.0)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    #: Traces kept per (role, config, arm).
    trace_retention: int = Field(100_000, ge=1)
    #: Comma-separated webhook URLs that receive rollout events.
    webhooks: str = ""
    data_dir: str = ".rolegate"
    #: Log resolves (their request and decision lines) too; 0 keeps the hot path quiet.
    log_resolves: bool = True
    testing: bool = False


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
