"""The SDK and a token read from a file: a final newline works, a bad one is refused unquoted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rolegate import Client, InvalidToken, SnapshotUnavailable
from rolegate.http import ApiClient
from tests.conftest import CALLER
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)

SECRET = "s3cr3t-tok"


@pytest.mark.parametrize("ending", ["\n", "\r\n", " \r\n\n"])
def test_client_with_token_from_a_file_resolves(router: LiveRouter, tmp_path: Path,
                                                ending: str) -> None:
    """`Client(url, open(file).read())` with the file's final newline or CR LF resolves."""
    put_role(router, "summarizer", current="summarizer@1")
    token_file = tmp_path / "token"
    token_file.write_bytes((CALLER + ending).encode())
    with open(token_file, newline="") as handle:  # as read: the CR LF kept
        token = handle.read()
    assert token.endswith(ending)
    with Client(router.url, token, start_timeout=5) as client:
        assert client.resolve("summarizer", "job-1")["config"] == "summarizer@1"


@pytest.mark.parametrize("bad", [f"{SECRET}\nmore", f"{SECRET} more", f"{SECRET}\x00",
                                 f"{SECRET}\u00e9"])
def test_bad_token_is_refused_at_once_never_quoted(
        router: LiveRouter, bad: str, caplog: pytest.LogCaptureFixture) -> None:
    """A space or control character inside: InvalidToken at construction, the token in no
    message, no log line, and never the "did not answer" of a router that was never asked."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidToken) as refused:
        Client(router.url, bad, start_timeout=3)
    assert not isinstance(refused.value, SnapshotUnavailable)
    assert isinstance(refused.value, ValueError)
    message = str(refused.value)
    assert "printable ASCII" in message and SECRET not in message
    assert SECRET not in repr(refused.value.details)
    assert SECRET not in caplog.text
    with pytest.raises(InvalidToken) as direct:
        ApiClient(router.url, bad)
    assert SECRET not in str(direct.value)
