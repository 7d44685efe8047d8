"""Run a request's long pure computation off the worker's event loop.

Under the shipped gevent workers (deploy/gunicorn.conf.py) every request of a
worker shares one OS thread: a request computing for a second would hold every
resolve of that worker for that second. `off_loop` runs such work (pure: no
sockets, no Redis, which belong to the loop's thread) in gevent's pool of native
threads, so the loop keeps answering while it runs; the interpreter hands the
GIL back and forth every few milliseconds. Under gthread or in tests it just calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def off_loop(work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`work(*args, **kwargs)`, in a native thread when this is a gevent worker."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return work(*args, **kwargs)
    import gevent  # type: ignore[import-untyped]  # no stubs; one call

    result: T = gevent.get_hub().threadpool.apply(work, args, kwargs)
    return result
