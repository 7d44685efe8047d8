"""`Client(config=ClientConfig(...))` beside the keywords: the same options, the same client.

Both forms against one live router: the same options, answers, masked reports and
failures; a config built wrong fails when it is built; mixing the forms is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any

import pytest
from flask import Flask

from rolegate import AsyncClient, Client, ClientConfig, SnapshotUnavailable
from rolegate.client_config import OPTIONS
from router.api.traces import trace_store
from tests.conftest import CALLER
from tests.live import (
    LiveRouter,
    apart_from_run,
    canary,
    put_role,
    refused_url,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)

STAMPS = {"agent_version": "1", "instruction_hash": "i", "model_id": "m", "tool_schema_hash": "t"}


def shout(value: Any) -> Any:
    """A mask that is easy to recognise in what the router stored."""
    return "MASKED" if isinstance(value, str) else {"masked": "MASKED"}


def test_the_keywords_and_the_config_list_the_same_options_and_defaults() -> None:
    """Every keyword of Client is a field of ClientConfig with the same default, and back."""
    params = inspect.signature(Client.__init__).parameters
    keywords = {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    keywords.pop("config")
    fields = {f.name: f.default for f in dataclasses.fields(ClientConfig)}
    assert keywords == {name: fields[name] for name in OPTIONS}
    assert params["token"].default is fields["token"] is None


def test_both_forms_resolve_and_report_alike(app: Flask, router: LiveRouter) -> None:
    """One client from keywords, one from a config with the same values: equal configs, equal
    answers for 200 keys, and a reported run stored masked the same way by both."""
    put_role(router, "support", current="cfg_a", candidate="cfg_b")
    canary(router, "support", 0.3)
    keywords: dict[str, Any] = {"refresh_interval": 0.5, "max_age": 60.0, "timeout": 3.0,
                                "stamps": STAMPS, "linger": 0.0, "mask": shout,
                                "subscribe": False, "batch_size": 10}
    config = ClientConfig(router.url, CALLER, **keywords)
    with Client(router.url, CALLER, **keywords) as by_keywords, Client(config=config) as by_config:
        assert by_keywords.config == by_config.config == config
        for client in (by_keywords, by_config):
            assert (client.url, client.refresh_interval, client.max_age, client.subscribe) == (
                router.url, 0.5, 60.0, False)
        answers = [(by_keywords.resolve("support", f"k{n}"), by_config.resolve("support", f"k{n}"))
                   for n in range(200)]
        assert all(apart_from_run(a) == apart_from_run(b) for a, b in answers)
        assert {a["arm"] for a, _ in answers} == {"current", "candidate"}
        run_ids = []
        for client in (by_keywords, by_config):
            with client.recorder(client.resolve("support", "job-1"),
                                 input={"ask": "secret"}) as run:
                run.output("secret answer")
            assert client.flush(10)
            run_ids.append(run.run_id)
    stored = [trace_store(app).lookup("support", run_id).trace for run_id in run_ids]
    assert [(t.input, t.output_text, t.config) for t in stored] == [
        ({"masked": "MASKED"}, "MASKED", stored[0].config)] * 2


def test_both_forms_fail_alike_without_a_router() -> None:
    """No router, no bootstrap: both raise SnapshotUnavailable after start_timeout."""
    url = refused_url()
    for make in (lambda: Client(url, CALLER, start_timeout=0.2),
                 lambda: Client(config=ClientConfig(url, CALLER, start_timeout=0.2))):
        with pytest.raises(SnapshotUnavailable, match=url):
            make()


def test_a_bad_config_fails_when_built_as_the_keywords_do() -> None:
    """The same checks, the same messages, whichever form carries the bad value."""
    for bad, message in (({"refresh_interval": 0}, "refresh_interval must be positive"),
                         ({"max_age": -1.0}, "max_age must be positive")):
        with pytest.raises(ValueError, match=message):
            ClientConfig("http://127.0.0.1:9", **bad)
        with pytest.raises(ValueError, match=message):
            Client("http://127.0.0.1:9", start_timeout=0, **bad)
    with pytest.raises(ValueError, match="url"):
        ClientConfig("")


def test_mixing_the_forms_or_giving_neither_is_refused() -> None:
    """A config plus a keyword, url or token is a TypeError naming them; neither form too."""
    config = ClientConfig("http://127.0.0.1:9", start_timeout=0)
    with pytest.raises(TypeError, match="also given: token, timeout"):
        Client(config=config, token="t", timeout=1.0)
    with pytest.raises(TypeError, match="also given: url"):
        Client("http://127.0.0.1:9", config=config)
    with pytest.raises(TypeError, match="needs the router's url"):
        Client()
    with pytest.raises(TypeError, match="must be a ClientConfig"):
        Client(config={"url": "http://127.0.0.1:9"})  # type: ignore[arg-type]


def test_the_async_client_takes_a_config(router: LiveRouter) -> None:
    """AsyncClient.create(config=...) resolves as the keyword form; a waiting config is refused."""
    put_role(router, "support", current="cfg_a")

    async def main() -> None:
        client = await AsyncClient.create(config=ClientConfig(router.url, CALLER))
        try:
            assert client.config.start_timeout == 0
            assert client.resolve("support", "k")["config"] == "cfg_a"
        finally:
            await client.aclose()
        with pytest.raises(ValueError, match="never waits"):
            AsyncClient(config=ClientConfig(router.url, CALLER, start_timeout=1.0))

    asyncio.run(main())
