"""The long-lived clients one router app holds, and the typed way to reach them.

`create_app` builds one `Services` and keeps it in `app.extensions[EXTENSION]`;
every view, hook and WSGI fast path reaches it through `services_of(app)`
(`services_of(current_app)` in a request), so mypy knows each field's type where
it is read, and a renamed field is a type error rather than an AttributeError
in production.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask

from bindings.connection import Connection
from bindings.store import BindingStore
from router.server import breaker
from router.server.cache import BindingCache
from router.server.quota import Quota
from router.server.settings import Settings
from router.server.tokens import TokenTable

#: The key of the app's Services in `app.extensions`.
EXTENSION = "rolegate"


@dataclass
class Services:
    """The long-lived clients one app holds, in `app.extensions[EXTENSION]`."""

    settings: Settings
    redis: Connection
    store: BindingStore
    cache: BindingCache
    tokens: TokenTable
    quota: Quota
    #: The circuit breaker on `redis`'s pool (None when it could not be put there: Cluster).
    breaker: breaker.Breaker | None = None


def services_of(app: Flask) -> Services:
    """The app's long-lived clients (`app` a Flask app, or `current_app` in a request)."""
    found: Services = app.extensions[EXTENSION]
    return found
