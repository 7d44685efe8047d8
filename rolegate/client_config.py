"""`ClientConfig`: every option of `Client` as one value, the form LaunchDarkly's SDK takes.

    config = ClientConfig("http://rolegate:8000", token, stamps=STAMPS, subscribe=False)
    client = Client(config=config)

The same options as `Client`'s keywords, with the same defaults (tests/test_client_config.py
holds the two lists equal), checked the same way: a config is validated when it is built, so
one that constructs is one a Client accepts. It is frozen; `dataclasses.replace(config,
timeout=2.0)` derives another. `Client(url, token, **keywords)` builds one of these itself,
so both forms run the same code from there on.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rolegate.trace import Stamps

__all__ = ["ClientConfig", "config_of"]


@dataclass(frozen=True)
class ClientConfig:
    """The router to talk to, the token, and every option of `Client` (docs/client.md, Options)."""

    url: str
    token: str | None = None
    refresh_interval: float = 2.0
    max_age: float | None = 300.0
    bootstrap: str | os.PathLike[str] | Mapping[str, Any] | None = None
    subscribe: bool = True
    watch_timeout: float = 20.0
    timeout: float = 5.0
    stamps: Stamps | Mapping[str, Any] | None = None
    agent_version: str | None = None
    max_queue: int = 10_000
    batch_size: int = 200
    flush_timeout: float = 10.0
    report_attempts: int = 5
    max_batch_bytes: int = 1024 * 1024
    start_timeout: float | None = None
    snapshot_path: str | os.PathLike[str] | None = None
    linger: float = 0.1
    mask: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError("url: the router's base URL, e.g. http://127.0.0.1:8080")
        if self.refresh_interval <= 0:
            raise ValueError("refresh_interval must be positive")
        if self.max_age is not None and self.max_age <= 0:
            raise ValueError("max_age must be positive (or None)")


#: The options besides url and token, in declaration order.
OPTIONS = tuple(f.name for f in dataclasses.fields(ClientConfig) if f.name not in ("url", "token"))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ClientConfig)}


def config_of(config: ClientConfig | None, url: str | None, token: str | None,
              options: Mapping[str, Any]) -> ClientConfig:
    """The config a Client runs with: `config` as given, or one built from url, token, options.

    With `config`, url, token and every option must be left at their defaults (TypeError
    naming the ones that were not): two sources for one setting would leave a reader
    guessing which one won.
    """
    if config is None:
        if url is None:
            raise TypeError("Client needs the router's url, or config=ClientConfig(url, ...)")
        return ClientConfig(url, token, **options)
    if not isinstance(config, ClientConfig):
        raise TypeError(f"config must be a ClientConfig, not {type(config).__name__}")
    given = [name for name, value in (("url", url), ("token", token)) if value is not None]
    given += [name for name in OPTIONS if name in options and options[name] != _DEFAULTS[name]]
    if given:
        raise TypeError(f"Client(config=...) reads every option from the config; also given: "
                        f"{', '.join(given)} (set them in the ClientConfig)")
    return config
