"""Gunicorn settings for rolegate's router: the packaged ones, for the deploy files.

The settings live in the installed package (`router/server/gunicorn_conf.py`),
which `rolegate serve` uses by default from any directory; this file is the
same settings under the path the systemd unit, the Dockerfile and
`gunicorn -c deploy/gunicorn.conf.py` name. It runs the packaged module afresh
each time gunicorn reads it (a reload, or a test with other ROLEGATE_* values),
rather than importing it once.
"""

from __future__ import annotations

import runpy

globals().update({name: value
                  for name, value in runpy.run_module("router.server.gunicorn_conf").items()
                  if not name.startswith("__")})
