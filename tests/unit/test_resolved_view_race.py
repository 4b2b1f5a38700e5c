"""A writer's first access must not fail with VersionNotFound when the version just below its marker
reaches the log between ``TableLogs.resolved_view``'s snapshot attempt and its look at the log's tail: the
tail then says the version exists, and the stale "no version" error used to be raised again. Found by the
schedule explorer with no faults injected: three repeatable_read transactions on two tables (A writes ta
then tb, S writes ta, B writes tb then ta); 16 of 120 transactions over seeds 0-39 failed with "table 'ta'
has no version 2" before the fix. Not an isolation violation: the transaction failed before writing."""

from __future__ import annotations

import pytest

from lv_core.blackbox.history import MicroOp
from tests.explorer.explore import _Random
from tests.explorer.run import Actor, Scenario, run_schedule

r, a = MicroOp.read, MicroOp.append

SC = Scenario("ct-one-marker-cycle", ("ta", "tb"), (
    Actor("A", "repeatable_read", (a("ta/0", 1), r("tb/0", None), a("tb/0", 1))),
    Actor("S", "repeatable_read", (r("ta/0", None), a("ta/0", 2))),
    Actor("B", "repeatable_read", (a("tb/0", 3), r("ta/0", None), a("ta/0", 3))),
))


@pytest.mark.parametrize("seed", [2, 4, 34])
def test_first_access_never_fails_with_version_not_found(seed):
    res = run_schedule(SC, SC.setup(), _Random(SC, seed, 0.0, 0.0, 0.0))
    assert res.ok
    failed = [t.error for t in res.history if "VersionNotFound" in t.error]
    assert not failed, failed
