"""The deploy files and packaging hold together (Docker itself cannot run here)."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import yaml
from click.testing import CliRunner

from router.cli import main

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def _compose() -> dict[str, object]:
    loaded = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_compose_has_redis_aof_router_and_gatekeeper() -> None:
    """compose.yaml runs Redis append-only, the router on it, and `rolegate gatekeeper`."""
    services = _compose()["services"]
    assert isinstance(services, dict)
    assert set(services) == {"redis", "router", "gatekeeper"}
    redis_cmd = services["redis"]["command"]
    assert redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    router = services["router"]
    assert router["environment"]["REDIS_URL"].startswith("redis://redis:6379")
    assert "ROLEGATE_TOKENS" in router["environment"]
    gatekeeper = services["gatekeeper"]
    assert gatekeeper["command"] == ["rolegate", "gatekeeper"]
    assert gatekeeper["image"] == router["image"]
    assert gatekeeper["environment"]["ROLEGATE_URL"] == "http://router:8080"
    assert gatekeeper["restart"] == "always"
    assert gatekeeper["healthcheck"] == {"disable": True}


def test_dockerfile_copies_what_exists_and_runs_a_real_command() -> None:
    """Every COPY source exists, and the CMD's `rolegate serve` options and config are real."""
    text = (DEPLOY / "Dockerfile").read_text()
    for line in text.splitlines():
        if line.startswith("COPY "):
            *sources, _dest = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), source
    cmd_line = next(line for line in text.splitlines() if line.startswith("CMD "))
    cmd = json.loads(cmd_line[4:])
    assert cmd[:2] == ["rolegate", "serve"]
    config = cmd[cmd.index("--config") + 1]
    assert config == "/opt/rolegate/deploy/gunicorn.conf.py"
    assert "WORKDIR /opt/rolegate" in text and "COPY deploy/ deploy/" in text
    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    for option in (o for o in cmd[2:] if o.startswith("--")):
        assert option in help_text, option


def test_gatekeeper_command_exists() -> None:
    """The command compose runs for the gatekeeper is a real CLI command."""
    result = CliRunner().invoke(main, ["gatekeeper", "--help"])
    assert result.exit_code == 0 and "--url" in result.output


def test_dashboard_files_are_package_data() -> None:
    """Every template and static file matches pyproject's package-data, so wheels ship them."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["router.dashboard"]
    package = ROOT / "router" / "dashboard"
    shipped = [p for sub in ("templates", "static") for p in (package / sub).iterdir()
               if p.is_file()]
    assert len(shipped) >= 7
    for path in shipped:
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative


def test_scaling_doc_names_real_keys() -> None:
    """docs/scaling.md names the Redis keys the code really uses."""
    from bindings.store import CHANGES_CHANNEL, GENERATION_KEY, ROLES_KEY

    text = (ROOT / "docs" / "scaling.md").read_text()
    for key in (GENERATION_KEY, ROLES_KEY, CHANGES_CHANNEL, "rolegate:{summarizer}:binding"):
        assert key in text, key
    assert re.search(r"hash tag", text)
