"""Token entries with role lists, the hashed tokens file (reloaded on change), and `tokens new`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from router.cli import main
from router.server.tokens import (
    Principal,
    TokenTable,
    file_line,
    parse_tokens,
    parse_tokens_file,
)


def test_an_entry_may_end_with_a_role_list() -> None:
    """`name=token:scope:a|b` limits the token to roles a and b; none or `*` means every role."""
    entries = {p.name: p for _, p in parse_tokens(
        "a=tok-a:caller:summarizer|triage,b=tok-b:caller:*,c=tok-c:caller,d=x:y:gatekeeper")}
    assert entries["a"].roles == frozenset({"summarizer", "triage"})
    assert entries["a"].may("summarizer") and not entries["a"].may("sql-analyst")
    assert entries["b"].roles is None and entries["c"].roles is None
    assert entries["d"].scope == "gatekeeper"
    table = TokenTable("a=tok-a:caller:summarizer|triage,d=x:y:gatekeeper")
    assert table.lookup("x:y") == Principal("d", "gatekeeper")
    assert table.lookup("tok-a") is not None and table.lookup("tok-b") is None


@pytest.mark.parametrize("spec", ["tok-XYZ:caller:bad role", "tok-XYZ:caller:a||b",
                                  "tok-XYZ:nobody", "tok-XYZ:caller:a|b\nc"])
def test_bad_entries_are_refused_without_quoting_the_token(spec: str) -> None:
    """A bad scope or role list stops the boot with a message that never holds the token."""
    with pytest.raises(ValueError) as caught:
        parse_tokens(spec)
    assert "ROLEGATE_TOKENS entry 1" in str(caught.value)
    assert "tok-XYZ" not in str(caught.value)


def test_the_tokens_file_holds_only_hashes(tmp_path: Path) -> None:
    """A file line made by file_line admits its token; the file never holds the token itself."""
    line = file_line("bot", "s3cret-token", "caller", ["summarizer"])
    assert "s3cret-token" not in line
    path = tmp_path / "tokens"
    path.write_text(f"# reporters\n\n{line}\n")
    table = TokenTable(None, str(path))
    assert not table.open
    assert table.lookup("s3cret-token") == Principal("bot", "caller", frozenset({"summarizer"}))
    assert table.lookup("sha256") is None


def test_the_tokens_file_is_reloaded_when_it_changes(tmp_path: Path) -> None:
    """A line added to the file admits its token without a restart; a broken file keeps the last table."""
    path = tmp_path / "tokens"
    path.write_text(file_line("one", "token-one", "caller") + "\n")
    table = TokenTable(None, str(path))
    assert table.lookup("token-two") is None
    path.write_text(file_line("one", "token-one", "caller") + "\n"
                    + file_line("two", "token-two", "reviewer") + "\n")
    os.utime(path, ns=(1, 1))  # a different mtime even within one clock tick
    assert table.reload_if_changed(force=True)
    assert table.lookup("token-two") == Principal("two", "reviewer")
    path.write_text("two=sha256:nothex:caller\n")
    assert not table.reload_if_changed(force=True)
    assert table.lookup("token-two") == Principal("two", "reviewer")


def test_a_broken_tokens_file_names_its_line() -> None:
    """A clear token, a bad digest or a missing name is refused naming the line."""
    for text in ("bob=plain-token:caller", "sha256:" + "a" * 64 + ":caller",
                 "bob=sha256:" + "A" * 64 + ":caller"):
        with pytest.raises(ValueError, match="line 1"):
            parse_tokens_file(text)


def test_tokens_new_prints_a_token_and_its_line() -> None:
    """`rolegate tokens new` prints a fresh token and the file line that admits exactly it."""
    result = CliRunner().invoke(main, ["tokens", "new", "ci-bot", "--scope", "caller",
                                       "--role", "summarizer", "--role", "triage"])
    assert result.exit_code == 0, result.output
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines())
    token, line = lines["token"].strip(), lines["line"].strip()
    [(_, principal)] = parse_tokens_file(line)
    assert principal == Principal("ci-bot", "caller", frozenset({"summarizer", "triage"}))
    table_file = parse_tokens_file(line)
    assert table_file[0][0] != token.encode()
    bad = CliRunner().invoke(main, ["tokens", "new", "ci-bot", "--scope", "caller",
                                    "--role", "no such role"])
    assert bad.exit_code == 2
