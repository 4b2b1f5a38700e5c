"""The schedule explorer (tests/explorer) with wider bounds than the default tier (slow tier).

Exhaustive mode: up to two preemptions per schedule for the read-skew scenario, one for the pause and
the three-transaction scenarios, and the order of one transaction's concurrent pool requests explored
too (``within``) where the budget allows. What stays bounded: the preemption count, the schedule
budget (a test reports when it, rather than the bounds, ended the search), and a poll loop's second
identical re-read in a row, deferred until nobody else can move. Random mode: many seeds with random
priorities, lost responses, a crash (then lease expiry and recovery) and pauses past the lease.

Replays may diverge here (a replayed request never comes: lv_core's background hint writes race, and
polls depend on real time); a diverged run is still a valid schedule, only not the one asked for, so
the search is then less systematic. The summary printed per test counts them.

Measured on main (5cb4f74, shared 2-core machine): read skew with 2 preemptions 600 schedules (198
pruned, 360 diverged) 250 s; read skew with within-actor orders 600 (523 pruned, 66 diverged) 63 s;
pause with 1 preemption 600 (253 diverged) 291 s, 294 of them the known G1a and nothing else; three
transactions 600 (157 diverged) 200 s; random 100 seeds per scenario 28-39 s each; no other violation.
"""

from __future__ import annotations

import pytest

from tests.explorer.explore import Exploration, explore, random_runs
from tests.explorer.scenarios import (
    READ_SKEW,
    SAME_TABLE_GROUP,
    SAME_TABLE_GROUP_READER,
    THREE,
    WRITE_SKEW_AFTER_PAUSE,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

#: The G1a the explorer found on main (tests/unit/test_schedule_explorer.py): a paused client told
#: "aborted" after publishing part of its commit. Reported separately from everything else.
KNOWN_G1A = frozenset({"G1a"})


def _unexpected(ex: Exploration) -> list[str]:
    return [v.describe() for v in ex.violations if v.report is not None and v.report.kinds - KNOWN_G1A]


@pytest.mark.parametrize(("scenario", "preemptions", "within", "budget"), [
    (READ_SKEW, 2, False, 600),
    (READ_SKEW, 1, True, 600),
    (WRITE_SKEW_AFTER_PAUSE, 1, False, 600),
    (THREE, 1, False, 600),
    (SAME_TABLE_GROUP, 1, False, 300),
    (SAME_TABLE_GROUP_READER, 1, False, 300),
], ids=["read-skew-2-preemptions", "read-skew-within", "pause-1-preemption", "three-1-preemption",
        "same-table-group-1-preemption", "same-table-group-reader-1-preemption"])
def test_exhaustive_within_wider_bounds(scenario, preemptions, within, budget) -> None:
    ex = explore(scenario, preemptions=preemptions, within=within, max_schedules=budget)
    print(scenario.name, ex.summary())
    bad = _unexpected(ex)
    assert not bad, bad[0]


@pytest.mark.parametrize("scenario", [READ_SKEW, WRITE_SKEW_AFTER_PAUSE, THREE, SAME_TABLE_GROUP,
                                      SAME_TABLE_GROUP_READER],
                         ids=lambda s: s.name)
def test_random_priorities_with_faults_many_seeds(scenario) -> None:
    ex = random_runs(scenario, range(200))
    print(scenario.name, ex.summary())
    bad = _unexpected(ex)
    assert not bad, bad[0]
