"""`rolegate bindings set|edit|new|archive|restore` against a live router."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner, Result
from flask import Flask, request

from bindings.models import Binding, BindingFile
from router.cli.edit import assign
from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}


@pytest.fixture
def live_url(app: Flask) -> Iterator[str]:
    """The test app over real HTTP with summarizer on a 0.1 canary (version 1)."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201
        yield url


def run(url: str, *args: str, **env: str) -> Result:
    """`rolegate ARGS` against `url` as the operator."""
    environment = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR,
                   "ROLEGATE_RETRY_NO_WAIT": "1", **env}
    return CliRunner().invoke(main, list(args), env=environment, catch_exceptions=False)


def stored(url: str, role: str = "summarizer") -> requests.Response:
    """GET the role's record."""
    return requests.get(f"{url}/v1/bindings/{role}", headers=auth(OPERATOR), timeout=5)


def test_set_changes_dotted_fields_and_shows_the_diff(live_url: str) -> None:
    """set writes gate.thresholds.min_samples=300 and a JSON list, prints a diff, keeps the rest."""
    result = run(live_url, "bindings", "set", "summarizer", "gate.thresholds.min_samples=300",
                 "steps=[0.1, 0.25, 1.0]", "description=nightly summaries")
    assert result.exit_code == 0, result.output
    assert "+      \"min_samples\": 300," in result.stdout
    assert "summarizer: version 1 -> 2" in result.stdout
    record = stored(live_url).json()
    binding = record["binding"]
    assert binding["gate"]["thresholds"]["min_samples"] == 300
    assert binding["steps"] == [0.1, 0.25, 1.0]
    assert binding["description"] == "nightly summaries"
    assert binding["share"] == 0.1 and binding["candidate"] == "cfg_b"
    history = requests.get(f"{live_url}/v1/bindings/summarizer/history", headers=auth(CALLER),
                           timeout=5).json()["entries"]
    assert history[0]["reason"].startswith("set gate.thresholds.min_samples=300")


def test_set_writes_with_if_match(app: Flask) -> None:
    """set's PUT carries the version it read as If-Match."""
    seen: list[str | None] = []

    @app.before_request
    def record() -> None:
        if request.method == "PUT":
            seen.append(request.headers.get("If-Match"))

    with werkzeug_server(app) as url:
        requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                     timeout=5)
        assert run(url, "bindings", "set", "summarizer", "paused=true").exit_code == 0
    assert seen == [None, "1"]


def test_set_accepts_a_step_with_its_own_duration(live_url: str) -> None:
    """steps may mix a bare share and {"share", "min_seconds"} (step durations)."""
    result = run(live_url, "bindings", "set", "summarizer",
                 'steps=[{"share": 0.1, "min_seconds": 600}, 0.5, 1]')
    assert result.exit_code == 0, result.output
    assert stored(live_url).json()["binding"]["steps"][0] == {"share": 0.1, "min_seconds": 600,
                                                               "approval": False}


def test_set_refuses_a_bad_value_naming_the_field_and_writes_nothing(live_url: str) -> None:
    """An invalid value or an unknown key exits 1 naming the field; the role is unchanged."""
    bad = run(live_url, "bindings", "set", "summarizer", "gate.thresholds.min_samples=0")
    assert bad.exit_code == 1 and "gate.thresholds.min_samples" in bad.stderr
    typo = run(live_url, "bindings", "set", "summarizer", "gate.thresholds.min_sample=5")
    assert typo.exit_code == 1 and "min_sample" in typo.stderr
    assert stored(live_url).json()["version"] == 1


def test_set_usage_errors_exit_2(live_url: str) -> None:
    """A KEY=VALUE without '=' or through a non-object exits 2."""
    assert run(live_url, "bindings", "set", "summarizer", "share").exit_code == 2
    assert run(live_url, "bindings", "set", "summarizer", "share.x=1").exit_code == 2


def test_set_unchanged_and_dry_run_write_nothing(live_url: str) -> None:
    """Setting a value it already has, or --dry-run, leaves the version alone."""
    same = run(live_url, "bindings", "set", "summarizer", "share=0.1")
    assert same.exit_code == 0 and "unchanged" in same.stdout
    dry = run(live_url, "bindings", "set", "summarizer", "share=0.3", "--dry-run")
    assert dry.exit_code == 0 and "dry run" in dry.stdout and "0.3" in dry.stdout
    assert stored(live_url).json()["version"] == 1


def _editor(tmp_path: Path, script: str) -> str:
    """An $EDITOR that runs `script` (Python, the file path in sys.argv[1])."""
    path = tmp_path / "editor.py"
    path.write_text(script)
    return f"{sys.executable} {path}"


def test_edit_opens_the_editor_validates_and_writes(live_url: str, tmp_path: Path) -> None:
    """edit hands $EDITOR the binding's JSON and writes the saved result with a diff."""
    editor = _editor(tmp_path, "import json, sys\n"
                     "p = sys.argv[1]\nd = json.load(open(p))\n"
                     "d['gate']['thresholds']['min_samples'] = 120\n"
                     "json.dump(d, open(p, 'w'))\n")
    result = run(live_url, "bindings", "edit", "summarizer", EDITOR=editor)
    assert result.exit_code == 0, result.output
    assert '"min_samples": 120' in result.stdout
    assert stored(live_url).json()["binding"]["gate"]["thresholds"]["min_samples"] == 120


def test_edit_refuses_broken_json_and_invalid_bindings(live_url: str, tmp_path: Path) -> None:
    """A saved file that is not JSON, or not a valid binding, exits 1 and writes nothing."""
    broken = _editor(tmp_path, "import sys\nopen(sys.argv[1], 'w').write('{not json')\n")
    assert run(live_url, "bindings", "edit", "summarizer", EDITOR=broken,
               TMPDIR=str(tmp_path)).exit_code == 1
    invalid = _editor(tmp_path, "import json, sys\np = sys.argv[1]\nd = json.load(open(p))\n"
                      "d['share'] = 0\njson.dump(d, open(p, 'w'))\n")
    result = run(live_url, "bindings", "edit", "summarizer", EDITOR=invalid)
    assert result.exit_code == 1 and "share" in result.stderr
    assert stored(live_url).json()["version"] == 1


def test_new_prints_the_documented_defaults(live_url: str, tmp_path: Path) -> None:
    """new prints a bindings file with every default; -o writes it; --create makes the role."""
    printed = run(live_url, "bindings", "new", "triage", "--current", "triage_v1")
    assert printed.exit_code == 0, printed.output
    document = BindingFile.model_validate_json(printed.stdout)
    assert document.roles["triage"] == Binding(current="triage_v1")
    assert json.loads(printed.stdout)["roles"]["triage"]["gate"]["thresholds"][
        "min_samples"] == 50
    out = tmp_path / "triage.json"
    assert run(live_url, "bindings", "new", "triage", "--current", "t1", "-o",
               str(out)).exit_code == 0
    assert run(live_url, "bindings", "import", str(out)).stdout == "triage: created\n"
    made = run(live_url, "bindings", "new", "other", "--current", "o1", "--candidate", "o2",
               "--create")
    assert made.exit_code == 0 and "created (version 1)" in made.stdout
    assert stored(live_url, "other").json()["binding"]["candidate"] == "o2"


def test_archive_and_restore_commands(live_url: str) -> None:
    """archive makes resolves answer 410 with the reason; history stays; restore undoes it."""
    archived = run(live_url, "bindings", "archive", "summarizer", "--reason", "retired")
    assert archived.exit_code == 0 and "archived at version 2" in archived.stdout
    gone = requests.get(f"{live_url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                        timeout=5)
    assert gone.status_code == 410 and gone.json()["error"]["details"]["reason"] == "retired"
    shown = run(live_url, "bindings", "show", "summarizer")
    assert shown.exit_code == 1 and "retired" in shown.stderr
    history = run(live_url, "bindings", "history", "summarizer").stdout.splitlines()
    assert "archive" in history[0] and "retired" in history[0]
    restored = run(live_url, "bindings", "restore", "summarizer", "--reason", "back")
    assert restored.exit_code == 0 and "restored as version 3, stage canary" in restored.stdout
    assert run(live_url, "bindings", "archive", "summarizer").exit_code == 2  # --reason missing


def test_assign_creates_missing_objects() -> None:
    """A dotted key through an absent object creates it."""
    assert assign({"a": 1}, "gate.drift.h=7") == {"a": 1, "gate": {"drift": {"h": 7}}}
    assert assign({}, "description=just words") == {"description": "just words"}
