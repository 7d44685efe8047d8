"""rolegate's router: the Flask app, its HTTP API, the CLI and the caller client.

`create_app()` is the factory gunicorn and the tests call (`router:create_app()`).
Flask is imported only when an app is built, so the HTTP client and the CLI's
helpers import without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    """Build the router app; see `router.app.create_app`."""
    from router.app import create_app as build

    return build(test_config)
