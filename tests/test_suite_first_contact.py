"""The offline suite as a new user meets it: config ids with '@', seed links, a venv's python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from gatekeeper.suite.adapter import split_command
from gatekeeper.suite.scenario import SuiteError, load_config, load_suite
from router.cli import main
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server
from tests.suite_support import EXAMPLE_AGENT, EXAMPLES, make_suite

SUITE = EXAMPLES / "suite"
GOOD = EXAMPLES / "configs" / "cfg_good.json"
README_ID = "summarizer@2026-11-18"


def _suite(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["suite", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _config_named(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(GOOD.read_text()), "name": name}))
    return path


def test_config_ids_follow_the_one_rule(tmp_path: Path) -> None:
    """A suite config takes every id a binding takes ('@' too) and refuses what it refuses."""
    assert load_config(_config_named(tmp_path, README_ID)).name == README_ID
    for bad in ("has space", "a/b", "..", "x" * 201):
        with pytest.raises(SuiteError, match="config id"):
            load_config(_config_named(tmp_path, bad))


def test_readme_style_config_passes_and_unlocks_shadow(app: Flask, tmp_path: Path) -> None:
    """`summarizer@2026-11-18` runs, its verdict posts, and require_offline_pass lets it in."""
    client = app.test_client()
    binding = {"current": "summarizer@2026-10-02", "candidate": README_ID,
               "gate": {"require_offline_pass": True}}
    assert client.put("/v1/bindings/summarizer", json=binding,
                      headers=auth(OPERATOR)).status_code == 201
    with werkzeug_server(app) as url:
        code, out, err = _suite("run", str(SUITE), "--config",
                                str(_config_named(tmp_path, README_ID)),
                                "--agent", EXAMPLE_AGENT, "--repeats", "1", "--quiet",
                                "--out", str(tmp_path / "r"), "--post", "--role", "summarizer",
                                "--url", url, "--token", GATEKEEPER)
    assert code == 0, out + err
    r = client.post("/v1/bindings/summarizer/promote", json={"reason": "suite passed"},
                    headers=auth(GATEKEEPER))
    assert r.status_code == 200, r.json
    assert r.json["binding"]["stage"] == "shadow"


def test_verdict_for_a_config_the_role_does_not_run_is_refused(client: FlaskClient) -> None:
    """409 naming the arms, nothing stored; an unknown role is 404."""
    assert client.put("/v1/bindings/summarizer", json={"current": "cfg_a", "candidate": "cfg_b"},
                      headers=auth(OPERATOR)).status_code == 201
    body = {"config": "cfg_typo", "passed": True}
    r = client.post("/v1/roles/summarizer/offline", json=body, headers=auth(GATEKEEPER))
    assert r.status_code == 409, r.json
    error = r.json["error"]
    assert error["details"]["refused"] == "not_an_arm"
    assert error["details"]["current"] == "cfg_a" and error["details"]["candidate"] == "cfg_b"
    assert "cfg_typo" in error["message"]
    assert client.get("/v1/roles/summarizer/offline/cfg_typo",
                      headers=auth(OPERATOR)).status_code == 404
    r = client.post("/v1/roles/nobody/offline", json=body, headers=auth(GATEKEEPER))
    assert r.status_code == 404, r.json
    for arm in ("cfg_a", "cfg_b"):
        r = client.post("/v1/roles/summarizer/offline", json={"config": arm, "passed": True},
                        headers=auth(GATEKEEPER))
        assert r.status_code == 201, r.json


def test_seed_symlink_out_of_the_suite_is_refused(tmp_path: Path) -> None:
    """A seed file that links outside the suite directory is refused naming it; nothing runs."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("root:x:0:0:SECRET-CONTENT\n")
    root = tmp_path / "suite"
    scenario = {"id": "s1", "task": "summarize", "seed_files": {"notes.md": "seed/notes.md"},
                "repeats": 1}
    (root / "seed").mkdir(parents=True)
    (root / "seed" / "notes.md").symlink_to(secret)
    with pytest.raises(SuiteError, match="outside the suite directory"):
        make_suite(root, [scenario], seeds={"seed/real.md": "fine"})
    out = tmp_path / "out"
    code, stdout, err = _suite("run", str(root), "--config", str(GOOD), "--agent", EXAMPLE_AGENT,
                               "--quiet", "--out", str(out))
    assert code == 2 and "outside the suite directory" in err
    assert not (out / "results.json").exists()
    assert "SECRET-CONTENT" not in stdout + err
    # A link that stays inside the suite is fine.
    (root / "seed" / "notes.md").unlink()
    (root / "seed" / "notes.md").symlink_to(root / "seed" / "real.md")
    assert load_suite(root).scenarios[0].id == "s1"


def test_agent_command_keeps_a_venv_python_unresolved(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`--agent "venv/bin/python agent.py"`, relative: the venv's python, with its packages."""
    venv = tmp_path / "agentvenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    assert python.is_symlink()
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(python), "-c", where], check=True, capture_output=True,
                          text=True).stdout
    Path(site.strip(), "only_in_agent_venv.py").write_text("MARK = 1\n")
    wrapper = tmp_path / "agent_in_venv.py"
    wrapper.write_text("import runpy, only_in_agent_venv\n"
                       f"runpy.run_path({str(EXAMPLES / 'agent.py')!r}, run_name='__main__')\n")
    monkeypatch.chdir(tmp_path)
    relative = os.path.join("agentvenv", "bin", "python")
    assert split_command(f"{relative} {wrapper}")[0] == str(tmp_path / relative)
    code, out, err = _suite("run", str(SUITE), "--config", str(GOOD),
                            "--agent", f"{relative} {wrapper}", "--repeats", "1", "--quiet",
                            "--out", str(tmp_path / "r"))
    assert code == 0, out + err
    assert "No module named" not in out + err
    shutil.rmtree(venv)
