"""rolegate's router: the Flask app factory and its parts, one subpackage each.

`api` (the HTTP API's blueprints), `server` (settings, auth, errors, the
binding cache, embedded Redis, logs, metrics), `cli` (the `rolegate` command),
`dashboard` (the operator pages) and `openapi` (the API's description). The
caller SDK is the separate `rolegate` package.

`create_app()` is the factory gunicorn and the tests call (`router:create_app()`).
Flask is imported only when an app is built, so the CLI's helpers import
without it.
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
