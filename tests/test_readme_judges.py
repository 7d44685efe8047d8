"""README's online-judges walk-through on examples/refunds/ runs as written, against a live router."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import OPERATOR
from tests.live import (
    LiveRouter,
    router,  # noqa: F401  (the pytest fixture the test below takes)
)
from tests.servers import free_port
from tests.test_docs_criteria import walkthrough

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- judges-walkthrough -->", "<!-- /judges-walkthrough -->"


@pytest.mark.slow
@pytest.mark.walkthrough
def test_the_readme_judges_walkthrough_runs_as_written(router: LiveRouter, tmp_path: Path) -> None:
    """Each command exits 0 and prints every output line shown; `&` lines run in the background."""
    text = (ROOT / "README.md").read_text()
    steps = walkthrough(text[text.index(START):text.index(END)])
    assert steps[0][0].startswith("export ROLEGATE_URL=")
    port = str(free_port())
    env = {**os.environ, "ROLEGATE_URL": router.url, "ROLEGATE_TOKEN": OPERATOR,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    # The example binding names the judge on 8090: the test's copy names a free port.
    binding = (ROOT / "examples/refunds/bindings_judged.json").read_text()
    copy = tmp_path / "bindings_judged.json"
    copy.write_text(binding.replace("127.0.0.1:8090", f"127.0.0.1:{port}"))
    background: list[subprocess.Popen[bytes]] = []
    try:
        for command, shown in steps[1:]:
            run = command.replace("--port 8090", f"--port {port}").replace(
                "examples/refunds/bindings_judged.json", str(copy))
            if run.endswith("&"):
                background.append(subprocess.Popen(["bash", "-c", f"exec {run[:-1]}"], cwd=ROOT,
                                                   env=env, stdout=subprocess.DEVNULL))
                _wait_for(int(port))
                continue
            done = subprocess.run(["bash", "-c", run], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=300, check=False)
            output = done.stdout + done.stderr
            assert done.returncode == 0, (command, output[-2000:])
            for line in shown:
                if line.strip() == "...":
                    continue
                assert line.strip() in output, (command, line, output[-3000:])
    finally:
        for process in background:
            process.send_signal(signal.SIGTERM)
            process.wait(10)


def _wait_for(port: int) -> None:
    import socket
    import time
    for _ in range(200):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the example judge never listened on {port}")
