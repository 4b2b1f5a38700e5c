"""The wall clock LakeVilla writes into leases and markers.

Other machines' clocks are never trusted to decide that a transaction is gone (see
:class:`lv_core.protocol.lease.LeaseObserver`), but timestamps are still written for people and for
`lv recover`. ``LV_TEST_CLOCK_SKEW_S`` shifts this process's wall clock (tests run one client with
its clock ahead or behind the others).
"""

from __future__ import annotations

import os
import time

__all__ = ["SKEW_S", "wall"]


def _skew() -> float:
    try:
        return float(os.environ.get("LV_TEST_CLOCK_SKEW_S", "0") or 0)
    except ValueError:
        return 0.0


SKEW_S = _skew()


def wall() -> float:
    """Seconds since the epoch by this process's clock (plus the test skew, if any)."""
    return time.time() + SKEW_S
