"""How long a test waits for a condition: the seconds it names, scaled to the machine's load.

A wait in a test is a bound on how long something may take before the test calls it
broken ("the standby takes over within 10 s"), written for an idle machine. On a
loaded one (CI beside other jobs, four xdist workers on two cores) every process
runs slower, and a bound written for idle fails a test that is right. So each
wait's timeout is multiplied by `scale()`:

- `ROLEGATE_TEST_TIMEOUT_SCALE` when set (a positive number: 3 on a shared CI box),
- else measured: the 1-minute load average per CPU (runnable processes per core,
  about how much slower each runs), at least 1 and at most MAX_MEASURED.

It is read afresh at each check, so a wait that began idle stretches as load
rises. Only waits for conditions scale: a test of a promised latency ("a rollback
reaches a client within a second") asserts its own bound beside the wait.
"""

from __future__ import annotations

import os

SCALE_ENV = "ROLEGATE_TEST_TIMEOUT_SCALE"
#: A measured scale goes no higher: past it the machine is too loaded to test on.
MAX_MEASURED = 4.0


def scale() -> float:
    """The factor every condition wait's timeout is multiplied by (see the module)."""
    given = os.environ.get(SCALE_ENV, "").strip()
    if given:
        try:
            value = float(given)
        except ValueError:
            raise ValueError(f"{SCALE_ENV}={given!r}: give a positive number, e.g. 2") from None
        if not value > 0:
            raise ValueError(f"{SCALE_ENV}={given!r}: give a positive number, e.g. 2")
        return value
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform: as if idle
        return 1.0
    return min(MAX_MEASURED, max(1.0, load))


def scaled(seconds: float) -> float:
    """`seconds` (a bound written for an idle machine) on this machine, now."""
    return seconds * scale()
