"""A gunicorn worker's settings read as plain attributes, not looked up on every use.

gunicorn reads its settings through `Config.__getattr__`, a dictionary lookup
and a method call each time: a request reads a dozen or more of them
(keepalive, the header limits, forwarded_allow_ips, secure_scheme_headers,
errorlog, post_request...), 3-4% of a resolve worker's CPU (issue 38).

A worker's Config never changes after it forks: gunicorn applies settings in
the master (`cfg.set` is called only while the app loads its configuration),
and a reload (HUP) forks new workers with a new Config. So `freeze(cfg)`, run
in each worker once it starts (the router's post_worker_init), copies every
setting's value into the Config instance, where attribute reads find it
without `__getattr__`. Settings that gunicorn serves through a property of
its own (worker_class, proc_name...) keep that property.
"""

from __future__ import annotations

from typing import Any


def freeze(cfg: Any) -> int:
    """Put each setting's current value on `cfg` as a plain attribute; return how many."""
    settings = getattr(cfg, "settings", None)
    if not isinstance(settings, dict):
        return 0
    own = vars(cfg)
    kind = type(cfg)
    frozen = 0
    for name, setting in settings.items():
        if hasattr(kind, name):  # a property or method of Config's own: left to it
            continue
        # Config.__setattr__ refuses setting names; the instance dict is the way past it.
        own[name] = setting.get()
        frozen += 1
    return frozen
