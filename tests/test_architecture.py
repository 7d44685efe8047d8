"""The package rules of docs/architecture.md hold, and the rule check can fail.

import-linter reads its contracts from pyproject.toml; grimp (its import graph)
finds file-level import circles, which no contract type covers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rolegate", "bindings", "gatekeeper", "router")
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"]


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([*LINT, "--config", str(cwd / "pyproject.toml"), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_are_kept() -> None:
    """Every contract in pyproject.toml (layers, the SDK's and the pure core's bans) is kept."""
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and result.stdout.count("KEPT") >= 4


def test_the_contracts_fail_when_bindings_imports_the_router(tmp_path: Path) -> None:
    """A copy of the tree where bindings imports router breaks the layers contract."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "templates", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    models = tmp_path / "bindings" / "models.py"
    models.write_text(models.read_text() + "\nimport router.app  # noqa: E402,F401\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "bindings is not allowed to import router" in result.stdout


def test_no_module_imports_itself_in_a_circle() -> None:
    """No file-level import cycle among our modules or bench's scripts (imports inside
    functions and type-checking ones included: the simulator once hid its circle,
    rollout_sim -> rollout_scenarios -> report_sim -> rollout_sim, in a function)."""
    graph = grimp.build_graph(*PACKAGES, "bench", cache_dir=None)
    ours = {m for m in graph.modules if m.split(".")[0] in (*PACKAGES, "bench")}
    cycles = []
    for module in sorted(ours):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported in ours and imported != module:
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back is not None:
                    cycles.append((module, *back))
    assert cycles == []


def test_no_module_is_over_400_lines() -> None:
    """One concern per module: none of ours, nor of bench's scripts, runs past about 400
    lines."""
    long = {str(path.relative_to(ROOT)): n for package in (*PACKAGES, "bench")
            for path in (ROOT / package).rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 420}
    assert long == {}


def test_router_holds_only_the_factory_and_subpackages() -> None:
    """router/ directly holds the app factory's modules; everything else is in a subpackage."""
    modules = sorted(p.name for p in (ROOT / "router").glob("*.py"))
    assert modules == ["__init__.py", "app.py"]
    for sub in (p for p in (ROOT / "router").iterdir() if (p / "__init__.py").is_file()):
        doc = (sub / "__init__.py").read_text().lstrip()
        assert doc.startswith('"""'), f"{sub.name}/__init__.py opens with no docstring"


@pytest.mark.slow
def test_the_sdk_imports_beside_an_apps_own_router_py(tmp_path: Path) -> None:
    """`from rolegate import Client` works beside router.py/bindings.py and loads no server lib."""
    for name in ("router.py", "bindings.py", "gatekeeper.py"):
        (tmp_path / name).write_text("raise ImportError('the app own module was imported')\n")
    probe = ("import sys\nfrom rolegate import Client\n"
             "print(sorted(m for m in ('flask', 'gunicorn', 'redis', 'werkzeug') "
             "if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_router_reaches_its_services_through_the_typed_getter() -> None:
    """Only router.server.services names the app's Services slot: every view, hook and fast
    path calls services_of(app), so mypy types each field where it is read."""
    slot = re.compile(r"""extensions(\[|\.get\()\s*["']rolegate["']""")
    reaching = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "router").rglob("*.py")
                      if slot.search(path.read_text()))
    assert reaching == []
    assert "EXTENSION" in (ROOT / "router" / "server" / "services.py").read_text()


def test_every_module_the_architecture_page_names_exists() -> None:
    """docs/architecture.md stays current: each dotted name it gives in backticks
    (`gatekeeper.machine.stages`, `rolegate.routing.bucket`, ...) is a module, or a name
    defined in one."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    names = {name for name in re.findall(
        r"`((?:rolegate|bindings|gatekeeper|router|bench)(?:\.\w+)+)", text)
        if not name.endswith(".py")}  # file names (`router.py`), not modules
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:cut])
            module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else \
                base / "__init__.py" if (base / "__init__.py").is_file() else None
            if module is not None:
                break
        rest = parts[cut:]
        if module is None or len(rest) > 2 or (rest and not re.search(
                rf"^(def |class )?{rest[0]}\b", module.read_text(), re.M)):
            missing.append(name)
    assert len(names) > 40 and missing == []
