"""The LICENSE file is the license pyproject.toml declares: the full Apache-2.0 text."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt as the ASF publishes it.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_is_the_apache_2_text_pyproject_names() -> None:
    """pyproject says Apache-2.0 and LICENSE holds that license's text, unchanged."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in text and b"END OF TERMS AND CONDITIONS" in text
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
