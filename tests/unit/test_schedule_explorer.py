"""The schedule explorer (tests/explorer), bounded for the default tier.

Real transactions (a thread and a Lakehouse each) run against an in-memory store whose requests
wait for a scheduler; every schedule's history is judged by the black-box checker. What is bounded
here (see tests/explorer/explore.py): at most one preemption per schedule (a switch away from a
transaction that could still move; pauses are not preemptions), one request per transaction as an
alternative at each choice point (the order of one transaction's concurrent pool requests is not
explored), a poll loop's second identical re-read in a row deferred until nobody else can move.
Within these bounds both isolation scenarios are exhausted. The slow tier widens the bounds.
"""

from __future__ import annotations

from typing import Any

import pytest

import lv_core.txn.access as access
from lv_core.errors import AlreadyExists, NotFound, PreconditionFailed
from lv_core.storage.base import CREATE, IfMatch
from tests.explorer.explore import Exploration, explore, random_runs
from tests.explorer.memstore import MemStore
from tests.explorer.scenarios import (
    READ_SKEW,
    SAME_TABLE,
    SAME_TABLE_GROUP,
    SAME_TABLE_GROUP_READER,
    THREE,
    WRITE_SKEW_AFTER_PAUSE,
)

WRITE_SKEW_KINDS = {"G2-item", "G-single"}


def test_memstore_honours_the_storage_contract() -> None:
    s = MemStore()
    first = s.put("a/1", b"x", mode=CREATE)
    with pytest.raises(AlreadyExists):
        s.put("a/1", b"y", mode=CREATE)
    with pytest.raises(PreconditionFailed):
        s.put("a/1", b"y", mode=IfMatch('"stale"'))
    second = s.put("a/1", b"yz", mode=IfMatch(first))
    assert second != first and s.get("a/1").data == b"yz" and s.head("a/1").size == 2
    assert s.get("a/1", byte_range=(1, 2)).data == b"z"
    s.put("a/2", b"")
    assert s.copy("a/1", "b/1") == second and s.get("b/1").data == b"yz"
    assert [m.key for m in s.list("a/")] == ["a/1", "a/2"]
    assert [m.key for m in s.list("a/", start_after="a/1")] == ["a/2"]
    clone = s.clone()
    s.delete("a/1")
    s.delete("a/1")  # deleting a missing key is no error
    with pytest.raises(NotFound):
        s.get("a/1")
    with pytest.raises(PreconditionFailed):
        s.put("a/1", b"q", mode=IfMatch(second))
    assert clone.get("a/1").data == b"yz"  # a clone is independent


def test_read_skew_on_new_tables_no_schedule_violates() -> None:
    """Issue 34, violation 1, on main: every schedule within the bounds passes the checker."""
    ex = explore(READ_SKEW, preemptions=1, max_schedules=150)
    assert ex.complete, ex.summary()  # the bounds were exhausted, not the budget
    # it did interleave the two (19 distinct schedules since reads under serializable cost 2 requests, issue 38)
    assert ex.schedules - ex.pruned >= 15, ex.summary()
    assert ex.diverged <= ex.schedules // 10, ex.summary()  # replays (mostly) ran the schedule asked for
    assert not ex.violations, ex.violations[0].describe()


def test_explorer_finds_read_skew_when_enrollment_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer can fail: with the fix of violation 1 reverted (a table new to the global log is read
    at its own latest version instead of being enrolled, as before e70f960) it finds the read skew."""
    if not hasattr(access, "enroll"):
        pytest.skip("lv_core.txn.access no longer reads new tables through enroll(): update this revert")
    monkeypatch.setattr(access, "enroll",
                        lambda core, table, head: core.services.logs.latest_snapshot(table, core.store).version)
    ex = explore(READ_SKEW, preemptions=1, max_schedules=60, stop_at_first=True)
    assert ex.violations, ex.summary()
    report = ex.violations[0].report
    assert report is not None and "G-single" in report.kinds, ex.violations[0].describe()


@pytest.fixture(scope="module")
def paused() -> Exploration:
    """Every schedule of the pause scenario without preemptions (P1 paused before each of its requests)."""
    return explore(WRITE_SKEW_AFTER_PAUSE, preemptions=0, max_schedules=100)


def test_write_skew_after_a_pause_no_schedule_shows_write_skew(paused: Exploration) -> None:
    """Issue 34, violation 2, on main: no schedule commits the write skew (or a read skew)."""
    assert paused.complete and paused.schedules >= 20, paused.summary()
    skews = [v for v in paused.violations if v.report is not None and v.report.kinds & WRITE_SKEW_KINDS]
    assert not skews, skews[0].describe()


def test_write_skew_after_a_pause_every_schedule_passes(paused: Exploration) -> None:
    """The explorer found a G1a here on main before publish freed read-only markers ahead of the parts:
    P1 paused right after publishing its ta commit, P2 freed its markers and read ta, P1 resumed, found
    its read-only tb marker lost and reported TransactionAborted(exposed_read) for a published write."""
    assert not paused.violations, paused.violations[0].describe()


def test_random_priorities_with_lost_responses_and_crashes() -> None:
    """Mode 2, a few seeds: three serializable transactions, random priorities, lost responses and a
    crash (then lease expiry and recovery) injected at requests."""
    ex = random_runs(THREE, range(8))
    assert ex.schedules == 8
    assert not ex.violations, ex.violations[0].describe()


def test_same_table_writers_queued_behind_a_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: three serializable writers of one table, random priorities with lost responses and
    crashes; some seeds queue a writer behind the holder, which then takes the free key with its plan
    (settled markers: nothing read before the claim). Every schedule passes the checker."""
    from lv_core.txn import group

    queued: list[str] = []
    busy = group.Waiter.busy

    def counted(self: group.Waiter) -> None:
        queued.append(self.core.id)
        busy(self)

    monkeypatch.setattr(group.Waiter, "busy", counted)
    ex = random_runs(SAME_TABLE, range(20))
    assert ex.schedules == 20
    assert queued, "no schedule queued a writer behind the holder: the scenario no longer covers the queue"
    assert not ex.violations, ex.violations[0].describe()


def test_same_table_writers_committed_by_a_holder_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38, same-table group commit: three serializable writers of one table with keyed predicates,
    random priorities with lost responses and crashes. Some seeds have a holder certify a writer queued
    behind it and commit it in its own global version; every schedule passes the checker (W3, which read
    W1's list, is never committed behind W1 on what it read before)."""
    from lv_core.protocol import samegroup

    verdicts: list[str | None] = []
    chain = samegroup.chain

    def counted(*args: Any) -> list[samegroup.Link]:
        links = chain(*args)
        verdicts.extend(ln.why for ln in links)
        return links

    monkeypatch.setattr(samegroup, "chain", counted)
    ex = random_runs(SAME_TABLE_GROUP, range(40))
    assert ex.schedules == 40
    assert None in verdicts, "no writer certified for it: the scenario no longer covers same-table groups"
    assert any(w and w.startswith("conflicts") for w in verdicts), "no conflicting writer met: W3 no longer covered"
    assert not ex.violations, ex.violations[0].describe()


def test_a_reader_beside_a_same_table_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: two keyed serializable writers of one table and a reader of both, random priorities with
    lost responses and crashes. A reader validating while a plan's table commits are written but not
    published does not count them (hidden.changes_since); every schedule passes the checker."""
    from lv_core.protocol import hidden

    skipped: list[bool] = []
    publishing_after = hidden._publishing_after

    def counted(*args: Any) -> bool:
        got = publishing_after(*args)
        skipped.append(got)
        return got

    monkeypatch.setattr(hidden, "_publishing_after", counted)
    ex = random_runs(SAME_TABLE_GROUP_READER, range(40))
    assert ex.schedules == 40
    print("plan commits a reader did not count:", skipped.count(True), "of", len(skipped))
    assert True in skipped, "no reader met a plan's unpublished commit: the scenario no longer covers it"
    assert not ex.violations, ex.violations[0].describe()
