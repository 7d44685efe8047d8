"""What a person meets first with the CLI: where --url goes, how it is typed, a token from a file."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner, Result
from flask import Flask

from router.cli import main
from tests.conftest import OPERATOR, auth
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


def test_import_and_serve_seed_print_clean_field_errors(live_url: str, tmp_path: Path) -> None:
    """A bad bindings file: one `field: message` line each, no pydantic dump or its links."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"roles": {"summarizer": {"current": "a", "share": "lots",
                                                        "stage": "sideways"}}}))
    for args in (["bindings", "import", str(bad), "--url", live_url],
                 ["serve", "--seed", str(bad)]):
        result = invoke(args, ROLEGATE_TOKEN=OPERATOR)
        assert result.exit_code == 1, result.output
        assert "errors.pydantic.dev" not in result.output
        assert "validation error" not in result.output and "input_value" not in result.output
        assert "roles.summarizer.share: " in result.output
        assert "roles.summarizer.stage: " in result.output
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    result = invoke(["bindings", "import", str(broken), "--url", live_url],
                    ROLEGATE_TOKEN=OPERATOR)
    assert result.exit_code == 1 and "errors.pydantic.dev" not in result.output
    assert "Invalid JSON" in result.output


def test_wrong_role_name_says_which_roles_exist(live_url: str) -> None:
    """A 404 for a role that does not exist lists the roles there are and the likeliest one."""
    result = invoke(["bindings", "show", "summarize", "--url", live_url],
                    ROLEGATE_TOKEN=OPERATOR)
    assert result.exit_code == 1
    assert "roles that exist: sql-analyst, summarizer, support-triage" in result.output
    assert "did you mean 'summarizer'?" in result.output
    moved = invoke(["canary", "sumarizer", "0.2", "--url", live_url], ROLEGATE_TOKEN=OPERATOR)
    assert moved.exit_code == 1 and "did you mean 'summarizer'?" in moved.output


def test_percent_share_says_what_fraction_is_meant(live_url: str) -> None:
    """`canary ROLE 10%` and `bindings set ROLE share=10%` say that 0.1 means 10%."""
    result = invoke(["canary", "summarizer", "10%", "--url", live_url], ROLEGATE_TOKEN=OPERATOR)
    assert result.exit_code == 2 and "0.1 means 10%" in result.output
    result = invoke(["bindings", "set", "summarizer", "share=25%", "--url", live_url],
                    ROLEGATE_TOKEN=OPERATOR)
    assert result.exit_code == 1 and "0.25 means 25%" in result.output


def test_edit_keeps_the_edits_and_reopens_on_a_validation_error(live_url: str,
                                                                tmp_path: Path) -> None:
    """Like kubectl edit: an invalid save reopens with the errors on top and the edits kept."""
    seen = tmp_path / "seen"
    seen.mkdir()
    # First save: a description change plus a bad share. Second: fix the share only.
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import json, sys, pathlib\n"
        f"seen = pathlib.Path({str(seen)!r})\n"
        "n = len(list(seen.iterdir()))\n"
        "text = open(sys.argv[1]).read()\n"
        "(seen / str(n)).write_text(text)\n"
        "body = ''.join(l for l in text.splitlines(True) if not l.startswith('#'))\n"
        "d = json.loads(body)\n"
        "if n == 0:\n"
        "    d['description'] = 'kept across the reopen'\n"
        "    d['share'] = 7\n"
        "else:\n"
        "    d['share'] = 0.2\n"
        "open(sys.argv[1], 'w').write(json.dumps(d))\n")
    result = invoke(["bindings", "edit", "summarizer", "--url", live_url],
                    ROLEGATE_TOKEN=OPERATOR, EDITOR=f"{sys.executable} {editor}",
                    TMPDIR=str(tmp_path))
    assert result.exit_code == 0, result.output
    second = (seen / "1").read_text()
    assert second.startswith("#") and "share" in second.split("\n", 3)[3]
    assert "kept across the reopen" in second
    record = requests.get(f"{live_url}/v1/bindings/summarizer", headers=auth(OPERATOR),
                          timeout=5).json()
    assert record["binding"]["share"] == 0.2
    assert record["binding"]["description"] == "kept across the reopen"


def test_edit_given_up_keeps_a_copy(live_url: str, tmp_path: Path) -> None:
    """Saving the reopened edit unchanged gives up: exit 1, nothing written, a copy kept."""
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys\n"
        "text = open(sys.argv[1]).read()\n"
        "if not text.startswith('#'):\n"
        "    open(sys.argv[1], 'w').write(text.replace('\"share\": 0.1', '\"share\": 9'))\n")
    result = invoke(["bindings", "edit", "summarizer", "--url", live_url],
                    ROLEGATE_TOKEN=OPERATOR, EDITOR=f"{sys.executable} {editor}",
                    TMPDIR=str(tmp_path))
    assert result.exit_code == 1, result.output
    kept = list(tmp_path.glob("rolegate-edit-summarizer-*.json"))
    assert len(kept) == 1 and '"share": 9' in kept[0].read_text()
    assert str(kept[0]) in result.output
    record = requests.get(f"{live_url}/v1/bindings/summarizer", headers=auth(OPERATOR),
                          timeout=5).json()
    assert record["version"] == 1
