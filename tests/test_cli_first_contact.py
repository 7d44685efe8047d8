"""What a person meets first with the CLI: where --url goes, how it is typed, a token from a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from flask import Flask

from router.cli import main
from tests.conftest import OPERATOR
from tests.servers import free_port, werkzeug_server

EXAMPLE = Path(__file__).resolve().parent.parent / "bindings.example.json"


@pytest.fixture
def live_url(app: Flask) -> Iterator[str]:
    """The test app over real HTTP on a free loopback port, the example's roles in it."""
    with werkzeug_server(app) as url:
        assert invoke(["--url", url, "--token", OPERATOR, "bindings", "import",
                       str(EXAMPLE)]).exit_code == 0
        yield url


def invoke(args: list[str], **env: str) -> Result:
    """`rolegate ARGS` with only the given environment (no ROLEGATE_* of the caller's)."""
    base = {"ROLEGATE_URL": None, "ROLEGATE_TOKEN": None, "ROLEGATE_RETRY_NO_WAIT": "1"}
    return CliRunner().invoke(main, args, env={**base, **env})


def test_global_options_before_the_subcommand(live_url: str) -> None:
    """`rolegate --url U --token T status` works, as after the subcommand."""
    result = invoke(["--url", live_url, "--token", OPERATOR, "status"])
    assert result.exit_code == 0, result.output
    assert "summarizer" in result.output


def test_subcommand_option_beats_global_beats_environment(live_url: str) -> None:
    """The subcommand's own --url wins over the group's, and the group's over ROLEGATE_URL."""
    dead = f"http://127.0.0.1:{free_port()}"
    before = invoke(["--url", live_url, "--token", OPERATOR, "bindings", "list"],
                    ROLEGATE_URL=dead)
    assert before.exit_code == 0, before.output
    after = invoke(["--url", dead, "bindings", "list", "--url", live_url],
                   ROLEGATE_TOKEN=OPERATOR)
    assert after.exit_code == 0, after.output


def test_url_without_scheme_and_with_v1(live_url: str) -> None:
    """`127.0.0.1:PORT` means http://; a trailing /v1 or / is dropped, not a bare 404."""
    host_port = live_url.removeprefix("http://")
    for typed in (host_port, f"{live_url}/v1", f"{live_url}/v1/", f"{host_port}/"):
        result = invoke(["bindings", "list", "--url", typed], ROLEGATE_TOKEN=OPERATOR)
        assert result.exit_code == 0, (typed, result.output)
        assert "summarizer" in result.output


def test_url_that_is_not_http_is_a_usage_error() -> None:
    """A URL of another scheme, or with a bad port, exits 2 naming it, no traceback."""
    for typed in ("ftp://example.org", "http://127.0.0.1:99999", "http://"):
        result = invoke(["status", "--url", typed])
        assert result.exit_code == 2, (typed, result.output)
        assert "--url" in result.output and "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("ending", ["\n", "\r\n", "  \n\n"])
def test_token_with_a_final_newline_or_cr_works(live_url: str, ending: str) -> None:
    """A token read from a file (`$(cat file)`, a Windows file) keeps working."""
    result = invoke(["status", "--url", live_url], ROLEGATE_TOKEN=OPERATOR + ending)
    assert result.exit_code == 0, result.output
    flag = invoke(["--token", OPERATOR + ending, "status", "--url", live_url])
    assert flag.exit_code == 0, flag.output


@pytest.mark.parametrize("bad", ["s3cr3t-tok\nen", "s3cr3t tok", "s3cr3t\x07tok", "s3cr3t\u00e9"])
def test_token_with_a_bad_character_inside_is_refused_without_printing_it(
        live_url: str, bad: str) -> None:
    """A space or control character inside: exit 2, a clear message, the token nowhere."""
    for args, env in ((["status", "--url", live_url], {"ROLEGATE_TOKEN": bad}),
                      (["--token", bad, "status", "--url", live_url], {})):
        result = invoke(args, **env)
        assert result.exit_code == 2, result.output
        assert "printable ASCII" in result.output
        assert "s3cr3t" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
