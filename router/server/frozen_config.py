"""A gunicorn worker's settings read as plain attributes, not looked up on every use.

gunicorn reads its settings through `Config.__getattr__`, a dictionary lookup
and a method call each time: a request reads a dozen or more of them
(keepalive, the header limits, forwarded_allow_ips, secure_scheme_headers,
errorlog, post_request...), 3-4% of a resolve worker's CPU (issue 38).

A worker's Config does not change after it forks: gunicorn applies settings in
the master (`cfg.set` is called only while the app loads its configuration),
and a reload (HUP) forks new workers with a new Config. So `freeze(cfg)`, run
in each worker once it starts (the router's post_worker_init), copies every
setting's value into the Config instance, where attribute reads find it
without `__getattr__`. Settings that gunicorn serves through a property of
its own (worker_class, proc_name...) keep that property.

That a worker never writes a setting is gunicorn's behaviour, not its promise,
so it is not relied on: each frozen setting's `set` also refreshes the copy, so
a write in the worker (`cfg.set(name, value)`, or the Setting's own `set`, the
one gunicorn's writes go through) is read at once. Before freezing, a probe
does all that on a throwaway Config of the same class and reads the settings
back; a gunicorn on which a write would not reach the copy (its Settings
refuse the hook, or it writes some other way) is left to its own lookups,
with a warning, as `router.server.one_send` leaves a Response it does not know.
A Config whose `settings` dict is replaced wholesale is not seen either way.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("rolegate")
#: The setting the probe writes and reads back (an int: its validator takes one).
PROBE = "keepalive"


def freeze(cfg: Any) -> int:
    """Put each setting's current value on `cfg` as a plain attribute, kept current by
    its writes; return how many (0: not a Config, or one the probe refused)."""
    settings = getattr(cfg, "settings", None)
    if not isinstance(settings, dict):
        return 0
    if not writes_reach_frozen(type(cfg)):
        log.warning("gunicorn's settings are read through its Config: on this gunicorn a "
                    "setting written after the fork would not reach the frozen copy "
                    "(router.server.frozen_config)")
        return 0
    return _freeze(cfg)


def writes_reach_frozen(kind: type) -> bool:
    """Whether, on a fresh `kind()` frozen, every setting reads as its Setting holds it,
    before and after a write through the Config and through the Setting."""
    try:
        probe = kind()
        _freeze(probe)
        was = getattr(probe, PROBE)
        probe.set(PROBE, was + 1)
        by_config = getattr(probe, PROBE) == was + 1
        probe.settings[PROBE].set(was + 2)
        by_setting = getattr(probe, PROBE) == was + 2
        own = vars(probe)
        same = all(own[name] == setting.get() for name, setting in probe.settings.items()
                   if name in own)
    except Exception:  # noqa: BLE001 - any change to what it relies on: gunicorn's own lookups
        return False
    return by_config and by_setting and same and PROBE in own


def _freeze(cfg: Any) -> int:
    own = vars(cfg)
    kind = type(cfg)
    frozen = 0
    for name, setting in cfg.settings.items():
        if hasattr(kind, name):  # a property or method of Config's own: left to it
            continue
        # Config.__setattr__ refuses setting names; the instance dict is the way past it.
        own[name] = setting.get()
        _refresh_on_write(own, name, setting)
        frozen += 1
    return frozen


def _refresh_on_write(own: dict[str, Any], name: str, setting: Any) -> None:
    """Make `setting.set` (Config.set calls it) put the new value in `own` too."""
    write = setting.set

    def set_and_refresh(value: Any) -> None:
        write(value)
        own[name] = setting.get()

    setting.set = set_and_refresh
