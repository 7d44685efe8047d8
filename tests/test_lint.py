"""The code meets its linters: ruff's chosen rules and mypy --strict, in the README's test command.

Both read their settings from pyproject.toml ([tool.ruff.lint], [tool.mypy]); the
import-linter contracts are held by tests/test_architecture.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bindings", "gatekeeper", "router", "rolegate")
#: Checked with them: bench's scripts (a namespace package, so named as packages with -p:
#: as paths mypy would find bench/load.py both as `load` and `bench.load`). A cold run
#: took 24.4 s of CPU against 23.0 s for the four packages alone (issue 39).
CHECKED = (*PACKAGES, "bench")
RUFF = [sys.executable, "-m", "ruff", "check", "--no-cache"]


def test_ruff_passes_on_the_repository() -> None:
    """`ruff check .` (the packages, tests, bench and examples) finds nothing."""
    result = subprocess.run([*RUFF, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_fails_on_a_violation(tmp_path: Path) -> None:
    """The same configuration reports an unused import and unsorted imports, naming the rules."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\nprint(os.sep)\n")
    result = subprocess.run([*RUFF, "--config", str(ROOT / "pyproject.toml"), str(bad)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "F401" in result.stdout and "I001" in result.stdout


@pytest.mark.slow
def test_mypy_strict_passes_on_the_packages() -> None:
    """`mypy --strict -p bindings -p gatekeeper -p router -p rolegate -p bench` reports no
    error (unused ignores too)."""
    packages = [arg for package in CHECKED for arg in ("-p", package)]
    # --cache-dir /dev/null: mypy writes no cache (it would go to the checkout's .mypy_cache;
    # the tests write only under temporary directories). In CI the cache is cold anyway.
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", "/dev/null",
                             *packages], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
