"""The operator CLI against a live router: its output, idempotent import, and exit codes."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from flask import Flask, request

from router.cli import main
from router.cli.main import COMMAND_MODULES, COMMANDS
from tests.conftest import CALLER, OPERATOR
from tests.servers import free_port, werkzeug_server

EXAMPLE = Path(__file__).resolve().parent.parent / "bindings.example.json"


@pytest.fixture
def live_url(app: Flask) -> Iterator[str]:
    """The test app served over real HTTP on a free loopback port."""
    with werkzeug_server(app) as url:
        yield url


def run(url: str, *args: str, token: str = OPERATOR) -> Result:
    """Invoke `rolegate ARGS` with ROLEGATE_URL/ROLEGATE_TOKEN pointing at `url`."""
    env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": token, "ROLEGATE_RETRY_NO_WAIT": "1"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _roles_file(tmp_path: Path, roles: dict[str, Any]) -> str:
    path = tmp_path / "bindings.json"
    path.write_text(json.dumps({"roles": roles}))
    return str(path)


def test_import_is_idempotent_and_says_what_changed(live_url: str, tmp_path: Path) -> None:
    """import creates, then reports unchanged, then updates only the role that differs."""
    first = run(live_url, "bindings", "import", str(EXAMPLE))
    assert first.exit_code == 0, first.output
    assert sorted(first.stdout.splitlines()) == [
        "sql-analyst: created", "summarizer: created", "support-triage: created"]
    again = run(live_url, "bindings", "import", str(EXAMPLE))
    assert again.exit_code == 0 and again.stdout.count("unchanged") == 3
    document = json.loads(EXAMPLE.read_text())
    document["roles"]["summarizer"]["share"] = 0.25
    changed = _roles_file(tmp_path, document["roles"])
    third = run(live_url, "bindings", "import", changed)
    assert "summarizer: updated" in third.stdout and third.stdout.count("unchanged") == 2
    history = run(live_url, "bindings", "history", "summarizer", "--json")
    actions = [e["action"] for e in json.loads(history.stdout)["entries"]]
    assert actions == ["replace", "create"]


def test_export_round_trips_through_import(live_url: str, tmp_path: Path) -> None:
    """export writes a file that import reads back as unchanged."""
    run(live_url, "bindings", "import", str(EXAMPLE))
    out = tmp_path / "export.json"
    assert run(live_url, "bindings", "export", "-o", str(out)).exit_code == 0
    assert sorted(json.loads(out.read_text())["roles"]) == sorted(
        json.loads(EXAMPLE.read_text())["roles"])
    back = run(live_url, "bindings", "import", str(out))
    assert back.exit_code == 0 and back.stdout.count("unchanged") == 3


def test_list_show_and_resolve(live_url: str) -> None:
    """list prints a row per role, show the record, resolve the router's answer."""
    run(live_url, "bindings", "import", str(EXAMPLE))
    listing = run(live_url, "bindings", "list")
    assert listing.exit_code == 0 and listing.stdout.splitlines()[0].startswith("ROLE")
    assert any(line.startswith("summarizer") and "canary" in line
               for line in listing.stdout.splitlines())
    shown = json.loads(run(live_url, "bindings", "show", "summarizer").stdout)
    assert shown["version"] == 1 and shown["binding"]["stage"] == "canary"
    answer = json.loads(run(live_url, "resolve", "support-triage", "--key", "job-9",
                            token=CALLER).stdout)
    assert answer["shadow"] == "triage@2026-11-25" and answer["key"] == "job-9"


def test_rollout_moves_and_history(live_url: str) -> None:
    """canary, promote, pause, resume and rollback each change the role and are in history."""
    run(live_url, "bindings", "import", str(EXAMPLE))
    assert "share 0.5" in run(live_url, "canary", "summarizer", "0.5").stdout
    assert "stage full" in run(live_url, "promote", "summarizer", "--reason", "gate ok").stdout
    assert "paused" in run(live_url, "pause", "summarizer", "--reason", "freeze").stdout
    assert run(live_url, "resume", "summarizer", "--reason", "thaw").exit_code == 0
    rolled = run(live_url, "rollback", "summarizer", "--reason", "tables vanished")
    assert rolled.exit_code == 0 and "stage rolled_back" in rolled.stdout
    restored = run(live_url, "rollback", "summarizer", "--to-version", "1", "--reason", "redo")
    assert "stage canary, share 0.1" in restored.stdout
    history = run(live_url, "bindings", "history", "summarizer").stdout.splitlines()
    assert len(history) == 7 and "redo" in history[0] and "tables vanished" in history[1]


def test_refusals_exit_1(live_url: str, tmp_path: Path) -> None:
    """A conflict, a server-side validation error, an unknown role and a bad file exit 1."""
    run(live_url, "bindings", "import", str(EXAMPLE))
    bad_share = run(live_url, "canary", "summarizer", "1.5")
    assert bad_share.exit_code == 1 and "share" in bad_share.stderr
    illegal = run(live_url, "rollback", "sql-analyst", "--reason", "nothing to undo")
    assert illegal.exit_code == 1 and "409" in illegal.stderr
    assert run(live_url, "bindings", "show", "ghost").exit_code == 1
    broken = _roles_file(tmp_path, {"x": {"current": "a", "stage": "canary", "share": 0.5}})
    refused = run(live_url, "bindings", "import", broken)
    assert refused.exit_code == 1 and "candidate" in refused.stderr


def test_usage_and_connection_errors_exit_2(live_url: str) -> None:
    """Bad usage, a rejected token and an unreachable server exit 2."""
    run(live_url, "bindings", "import", str(EXAMPLE))
    assert run(live_url, "rollback", "summarizer").exit_code == 2  # --reason missing
    assert run(live_url, "canary", "summarizer", "lots").exit_code == 2
    assert run(live_url, "bindings", "list", token="wrong").exit_code == 2
    assert run(live_url, "canary", "summarizer", "0.5", token=CALLER).exit_code == 2
    dead = run(f"http://127.0.0.1:{free_port()}", "bindings", "list")
    assert dead.exit_code == 2 and "cannot reach" in dead.stderr


def test_moves_send_if_match_with_the_version_they_read(app: Flask) -> None:
    """Each CLI move is a compare-and-set: its POST carries If-Match with the version read."""
    seen: list[tuple[str, str | None]] = []

    @app.before_request
    def record() -> None:
        if request.method == "POST":
            seen.append((request.path, request.headers.get("If-Match")))

    with werkzeug_server(app) as url:
        run(url, "bindings", "import", str(EXAMPLE))
        assert run(url, "canary", "summarizer", "0.3").exit_code == 0
        assert run(url, "promote", "summarizer", "--reason", "gate ok").exit_code == 0
        assert run(url, "rollback", "summarizer", "--reason", "undo").exit_code == 0
    assert seen == [("/v1/bindings/summarizer/canary", "1"),
                    ("/v1/bindings/summarizer/promote", "2"),
                    ("/v1/bindings/summarizer/rollback", "3")]


def test_url_and_token_options_override_environment(live_url: str) -> None:
    """--url and --token take precedence over ROLEGATE_URL and ROLEGATE_TOKEN."""
    dead = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["bindings", "list", "--url", live_url, "--token", OPERATOR],
                                env={"ROLEGATE_URL": dead, "ROLEGATE_TOKEN": "wrong"})
    assert result.exit_code == 0, result.output


def test_the_command_table_names_what_each_module_registers() -> None:
    """main's table of lazily imported commands is what the command modules register."""
    registered: dict[str, set[str]] = {}
    for module in COMMAND_MODULES:
        group = click.Group()
        importlib.import_module(module).register(group)
        for name in group.commands:
            registered.setdefault(name, set()).add(module)
    assert set(COMMANDS) == set(registered)
    assert all(registered[name] <= set(modules) for name, modules in COMMANDS.items())
    assert "bindings" in CliRunner().invoke(main, ["--help"]).output


def test_a_command_over_http_imports_no_server_module() -> None:
    """`rolegate status --help` in a fresh interpreter loads neither gatekeeper nor gunicorn."""
    script = ("import sys\n"
              "from router.cli.main import main\n"
              "main(['status', '--help'], standalone_mode=False)\n"
              "print(sorted(name for name in sys.modules if name.split('.')[0] in\n"
              "             ('gunicorn', 'gevent', 'opentelemetry', 'flask')\n"
              "             or name in ('gatekeeper.loop', 'router.cli.serve')))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "status" in done.stdout and done.stdout.rstrip().endswith("[]"), done.stdout[-500:]
