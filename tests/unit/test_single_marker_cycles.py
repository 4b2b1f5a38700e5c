"""Issue 38: a transaction holding one marker neither searches for cycles nor exposes its edges (a cycle
through it has a shorter one without it). Each test builds a cycle the search used to follow through such a
transaction's edges object, and checks that every transaction commits (no timeout, no ``deadlock`` abort)
and no update is lost: the shorter cycle, or the edge exposed with the second marker, is found in time."""

from __future__ import annotations

import pytest

import lv_core
from tests.helpers.bank import add_kv, committed_kv, make_kv

pytestmark = pytest.mark.usefixtures("log_immutability")


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.02)
    for t in ("t0", "t1", "t2"):
        make_kv(lh, t, {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0})
    return lh


def _commit_all(txns, first):
    futures = [t.commit_async() for t in txns if t is not first]
    first.commit()
    for f in futures:
        f.result(timeout=30)


@pytest.mark.parametrize("preset", ["repeatable_read", "serializable"])
def test_second_marker_taken_later_exposes_the_kept_back_edge_in_time(lh, preset):
    """Y holds t0; T queues behind it in t0 (one marker: nothing exposed), then takes t1 first; Y then
    queues behind T in t1. The cycle Y -> T -> Y needs T's kept-back t0 edge: Y must find it."""
    y, t = lh.begin(preset, timeout_s=20), lh.begin(preset, timeout_s=20)
    add_kv(y, "t0", 1, 1)
    add_kv(t, "t0", 2, 1)
    add_kv(t, "t1", 1, 1)  # (what T exposes now: test_single_marker_edges)
    add_kv(y, "t1", 2, 1)
    _commit_all([y, t], first=t)
    assert committed_kv(lh, "t0") == {1: 1.0, 2: 1.0, 3: 0.0, 4: 0.0}
    assert committed_kv(lh, "t1") == {1: 1.0, 2: 1.0, 3: 0.0, 4: 0.0}


def test_two_one_marker_transactions_in_a_row_on_the_cycle(lh):
    """Y holds t0; S1 and S2 (one marker each) queue behind Y in t0; X holds t1, queues behind all
    three in t0; Y queues behind X in t1. Cycle Y -> X -> S2 -> S1 -> Y has the short one Y -> X -> Y."""
    p = "repeatable_read"
    y, s1, s2, x = (lh.begin(p, timeout_s=20) for _ in range(4))
    add_kv(y, "t0", 1, 1)
    add_kv(s1, "t0", 2, 1)
    add_kv(s2, "t0", 3, 1)
    add_kv(x, "t1", 1, 1)
    add_kv(x, "t0", 4, 1)
    add_kv(y, "t1", 2, 1)
    _commit_all([y, s1, s2, x], first=y)
    assert committed_kv(lh, "t0") == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert committed_kv(lh, "t1") == {1: 1.0, 2: 1.0, 3: 0.0, 4: 0.0}


def test_cycle_over_three_tables_through_one_marker_readers(lh):
    """A three-table ring A(t0,t1) -> B(t1,t2) -> C(t2,t0) -> A with a one-marker reader R queued in each
    table between the holders: every edge into a holder passes an unexposed R."""
    p = "repeatable_read"
    a, b, c = (lh.begin(p, timeout_s=20) for _ in range(3))
    rs = [lh.begin(p, timeout_s=20) for _ in range(3)]
    add_kv(a, "t0", 1, 1)
    add_kv(b, "t1", 1, 1)
    add_kv(c, "t2", 1, 1)
    for r, tab in zip(rs, ("t0", "t1", "t2"), strict=True):
        add_kv(r, tab, 2, 1)
    add_kv(a, "t1", 3, 1)   # a -> r1 -> b
    add_kv(b, "t2", 3, 1)   # b -> r2 -> c
    add_kv(c, "t0", 3, 1)   # c -> r0 -> a: closes the ring
    _commit_all([a, b, c, *rs], first=a)
    for tab in ("t0", "t1", "t2"):
        assert committed_kv(lh, tab) == {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0}
