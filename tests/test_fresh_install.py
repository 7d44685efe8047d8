"""A fresh machine: the wheel, and the Docker image's install, run with only what they declare.

The test extra pulls in packages (packaging, through pytest) that the service
needs too, so the suite's own venv cannot see a missing runtime dependency.
These tests install into NEW venvs with only the runtime dependencies and run
the service from a directory outside the checkout, as a new user or the image
would. They take a minute or two (a wheel build and an install each; pip's
cache makes the install mostly local).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.servers import ROOT, base_env, free_port, process

pytestmark = [pytest.mark.slow, pytest.mark.walkthrough]

#: What a wheel is built from: pyproject's packages.find, its readme, itself.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "rolegate", "router", "bindings", "gatekeeper")
#: Framework integrations import their framework: its users install it themselves
#: (rolegate/integrations/__init__.py). Their shared helpers take no framework.
INTEGRATIONS = "rolegate.integrations."
INTEGRATION_HELPERS = ("rolegate.integrations._common",)
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".venv")


def _run(argv: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 900) -> str:
    """Run `argv`; fail with its output if it fails."""
    done = subprocess.run([str(a) for a in argv], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env(**overrides: str) -> dict[str, str]:
    """No rolegate variable, no PYTHONPATH leading back into the checkout."""
    env = base_env(**overrides)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _new_venv(where: Path) -> Path:
    """A new venv with a `pip` and nothing else; return its bin directory.

    Its `pip` is this interpreter's pip aimed at the venv (`pip --python`, which runs pip
    under the venv's interpreter and installs into it), as wheel_venv installs: ensurepip
    copying a pip into the venv took 5.5 CPU-s, for a pip the image's RUN lines only call.
    """
    _run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent)
    bin_dir = where / "bin"
    pip = bin_dir / "pip"
    pip.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m pip --python "
                   f"{shlex.quote(str(bin_dir / 'python'))} \"$@\"\n")
    pip.chmod(0o755)
    return bin_dir


def _module_names(python: Path, cwd: Path) -> list[str]:
    """Every module of the installed packages, as the venv's python finds them."""
    listing = (
        "import pkgutil, importlib\n"
        "for top in ('rolegate', 'bindings', 'gatekeeper', 'router'):\n"
        "    package = importlib.import_module(top)\n"
        "    print(top)\n"
        "    for info in pkgutil.walk_packages(package.__path__, top + '.'):\n"
        "        print(info.name)\n"
    )
    return _run([python, "-c", listing], cwd=cwd, env=_clean_env()).split()


# Its tests share one worker under -n (xdist_group): a second build would cost as much.
@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv holding the built wheel with `[embedded]` only; yields its bin directory."""
    base = tmp_path_factory.mktemp("fresh")
    source = base / "source"
    source.mkdir()
    # Build from a copy: an in-tree build would write build/ into the checkout.
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=_IGNORE)
        else:
            shutil.copy2(ROOT / name, source / name)
    wheels = base / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, source],
         cwd=base, env=_clean_env())
    (wheel,) = wheels.glob("rolegate-*.whl")
    # No pip inside (this pip installs into it, saving ensurepip's seconds); no
    # bytecode compiled at install (the service compiles what it imports).
    _run([sys.executable, "-m", "venv", "--without-pip", base / "venv"], cwd=base)
    bin_dir = base / "venv" / "bin"
    _run([sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q",
          "--no-compile", f"{wheel}[embedded]"], cwd=base, env=_clean_env())
    yield bin_dir


@pytest.mark.xdist_group("wheel_venv")
def test_wheel_venv_has_no_test_extra_and_imports_every_module(wheel_venv: Path) -> None:
    """Only the runtime deps are there (no pytest), and each shipped module imports with them."""
    elsewhere = wheel_venv.parent.parent
    python = wheel_venv / "python"
    missing = subprocess.run([python, "-c", "import pytest"], check=False, cwd=elsewhere,
                             env=_clean_env(), capture_output=True)
    assert missing.returncode != 0, "the fresh venv holds pytest: not runtime deps only"
    names = [n for n in _module_names(python, elsewhere)
             if (not n.startswith(INTEGRATIONS) or n in INTEGRATION_HELPERS)
             and not n.endswith("__main__")]
    assert "router.server.gunicorn_conf" in names and "rolegate.client" in names
    script = ("import importlib, sys\n"
              "for name in sys.argv[1:]:\n"
              "    importlib.import_module(name)\n"
              "import router\n"
              "print(router.__file__)\n")
    where = _run([python, "-c", script, *names], cwd=elsewhere, env=_clean_env())
    assert where.strip().startswith(str(wheel_venv.parent)), where


@pytest.mark.xdist_group("wheel_venv")
def test_installed_wheel_serves_from_any_directory(wheel_venv: Path, tmp_path: Path) -> None:
    """`rolegate serve` from a temp dir (embedded Redis, the example seeded) resolves summarizer."""
    example = tmp_path / "bindings.example.json"
    shutil.copy2(ROOT / "bindings.example.json", example)
    summarizer = json.loads(example.read_text())["roles"]["summarizer"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [str(wheel_venv / "rolegate"), "serve", "--port", str(port), "--workers", "1",
            "--data-dir", str(tmp_path / "data"), "--seed", example.name]
    with process(argv, _clean_env(), url, timeout=120, cwd=tmp_path):
        answer = requests.get(f"{url}/v1/resolve/summarizer", params={"key": "job-42"},
                              timeout=10)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["role"] == "summarizer" and body["stale"] is False
        assert body["config"] in (summarizer["current"], summarizer["candidate"])
        # What else is read from the package at run time: the dashboard's templates
        # and static files (package data), the OpenAPI document.
        page = requests.get(f"{url}/roles/summarizer", timeout=10)
        assert page.status_code == 200 and "summarizer" in page.text, page.text[:500]
        assert requests.get(f"{url}/ui/static/dashboard.css", timeout=10).status_code == 200
        assert requests.get(f"{url}/openapi.json", timeout=10).json()["openapi"].startswith("3.")


# --- deploy/Dockerfile, without a Docker daemon -----------------------------------------------


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


class Image:
    """A Dockerfile's filesystem and commands replayed into a directory and a venv."""

    #: RUN lines that set the container up for a user, not the install: skipped here.
    SKIPPED_RUNS = ("useradd ",)
    #: ENV that only keeps the image small; honoured it would bypass pip's cache here.
    SKIPPED_ENV = ("PIP_NO_CACHE_DIR",)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = _new_venv(root / "venv")
        self.workdir = root
        self.env = _clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")
        self.cmd: list[str] = []

    def path(self, image_path: str) -> Path:
        """Where an image path lives here (relative ones from the WORKDIR)."""
        if image_path.startswith("/"):
            return self.root / image_path.lstrip("/")
        return self.workdir / image_path

    def build(self, dockerfile: Path, context: Path) -> None:
        """Replay every instruction in order."""
        for word, args in _instructions(dockerfile):
            getattr(self, f"_do_{word.lower()}", self._unknown(word))(args, context)

    def _unknown(self, word: str) -> object:
        def refuse(args: str, context: Path) -> None:
            raise AssertionError(f"this test cannot replay Dockerfile {word} {args}")
        return refuse

    def _do_from(self, args: str, context: Path) -> None:
        assert args.startswith("python:3.11"), args  # the venv's interpreter stands in for it

    def _do_env(self, args: str, context: Path) -> None:
        for pair in shlex.split(args):
            name, _, value = pair.partition("=")
            if name not in self.SKIPPED_ENV:
                self.env[name] = value

    def _do_workdir(self, args: str, context: Path) -> None:
        self.workdir = self.path(args)
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _do_copy(self, args: str, context: Path) -> None:
        *sources, dest = shlex.split(args)
        target = self.path(dest)
        for source in sources:
            origin = context / source
            if origin.is_dir():
                shutil.copytree(origin, target, dirs_exist_ok=True, ignore=_IGNORE)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)

    def _do_run(self, args: str, context: Path) -> None:
        if args.startswith(self.SKIPPED_RUNS):
            return
        _run(["bash", "-c", args], cwd=self.workdir, env=self.env)

    def _do_user(self, args: str, context: Path) -> None:
        return

    def _do_expose(self, args: str, context: Path) -> None:
        return

    def _do_healthcheck(self, args: str, context: Path) -> None:
        return

    def _do_cmd(self, args: str, context: Path) -> None:
        self.cmd = json.loads(args)


# Its tests share one worker under -n (xdist_group), as wheel_venv's do.
@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """deploy/Dockerfile replayed: its COPY lines into a temp dir, its RUN lines in a new venv."""
    built = Image(tmp_path_factory.mktemp("image"))
    built.build(ROOT / "deploy" / "Dockerfile", ROOT)
    return built


@pytest.mark.xdist_group("dockerfile_image")
def test_dockerfile_image_runs_the_cli_and_the_app_factory(image: Image, redis_url: str) -> None:
    """`rolegate --help` and `create_app()` work in what the Dockerfile installs."""
    help_text = _run(["rolegate", "--help"], cwd=image.workdir, env=image.env)
    assert "serve" in help_text and "gatekeeper" in help_text
    factory = ("from router import create_app\n"
               "app = create_app()\n"
               "print(app.test_client().get('/healthz').status_code)\n")
    status = _run(["python", "-c", factory], cwd=image.workdir,
                  env={**image.env, "REDIS_URL": redis_url})
    assert status.split()[-1] == "200", status


@pytest.mark.xdist_group("dockerfile_image")
def test_dockerfile_cmd_serves(image: Image, redis_url: str) -> None:
    """The image's CMD (its host and port moved to a free loopback port) answers resolves."""
    assert image.cmd[:2] == ["rolegate", "serve"], image.cmd
    port = free_port()
    argv = [image.cmd[0]]
    for arg in image.cmd[1:]:
        if arg.startswith("/"):
            arg = str(image.path(arg))
        argv.append({"0.0.0.0": "127.0.0.1", "8080": str(port)}.get(arg, arg))
    argv = [str(image.bin / argv[0]), *argv[1:], "--workers", "1"]
    env = {**image.env, "REDIS_URL": redis_url, "ROLEGATE_DATA_DIR": str(image.root / "data"),
           "ROLEGATE_SEED_FILE": str(image.workdir / "bindings.example.json")}
    url = f"http://127.0.0.1:{port}"
    with process(argv, env, url, timeout=120, cwd=image.workdir):
        answer = requests.get(f"{url}/v1/resolve/summarizer", params={"key": "job-42"},
                              timeout=10)
        assert answer.status_code == 200, answer.text
