"""A transaction holding one marker neither looks for cycles nor exposes its edges (issue 38).

Eight serializable writers of one table each read the edges objects of those below them (a breadth
first search, one round trip per level) and PUT their own before settling: ~60 ms of a contended
write at 20 ms a request, and 2 of every 11 requests. No cycle needs them (docs/PROTOCOL.md,
"Special cases"; ``waiting.single_marker_edges``): a cycle through a one-marker transaction has a
shorter one without it, which the transactions holding several markers find and break.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

import lv_core
from lv_core.protocol.edges import read_edges
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, committed_kv, make_kv

pytestmark = pytest.mark.usefixtures("log_immutability")


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = lv_core.Lakehouse(InstrumentedStore(lv_core.connect(str(tmp_path / "wh")).store), lease_s=10.0,
                           cycle_check_s=0.02)
    for t in ("t0", "t1"):
        make_kv(lh, t, {1: 0.0, 2: 0.0, 3: 0.0})
    return lh


def _edges_requests(lh: lv_core.Lakehouse, run: Callable[[], Any]) -> list[tuple[str, str]]:
    """The requests ``run`` makes on edges objects, (kind, key)."""
    seen: list[tuple[str, str]] = []
    store: Any = lh.store
    real = store._request

    def record(kind: str, key: str, call: Callable[[], Any]) -> Any:
        if key.endswith("/edges.json"):
            seen.append((kind, key))
        return real(kind, key, call)

    store._request = record
    try:
        run()
    finally:
        store._request = real
    return seen


@pytest.mark.parametrize("preset", ["serializable", "repeatable_read"])
def test_a_one_table_writer_behind_a_pending_marker_reads_and_writes_no_edges(lh, preset):
    """Fails on the code before: T2 read T1's edges object (the search) and PUT its own."""
    t1, t2 = lh.begin(preset, timeout_s=20), lh.begin(preset, timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    made = _edges_requests(lh, lambda: add_kv(t2, "t0", 2, 10))
    assert made == []
    assert t2.dag().edges and {e.dst for e in t2.dag().edges} == {t1.id}  # the edge is known locally
    assert read_edges(lh.store, t2.id) is None
    # waiting at commit looks for no cycle either (it could shift no other table)
    f2 = t2.commit_async()
    waited = _edges_requests(lh, lambda: (t1.commit(), f2.result(timeout=30)))
    assert [k for k in waited if k[0] == "GET"] == []
    assert committed_kv(lh, "t0") == {1: 1.0, 2: 10.0, 3: 0.0}


def test_edges_kept_back_are_exposed_once_a_second_marker_is_held(lh):
    """T2 queues behind T1 in t0 holding one marker (nothing exposed), then writes t1 where nobody is
    ahead of it: its edges object now names the t0 edge and both markers, so a transaction that
    queues behind T2 in t1 can follow T2 -> T1."""
    t1, t2 = lh.begin("repeatable_read", timeout_s=20), lh.begin("repeatable_read", timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    add_kv(t2, "t0", 2, 10)
    assert read_edges(lh.store, t2.id) is None
    add_kv(t2, "t1", 2, 10)
    got = read_edges(lh.store, t2.id)
    assert got is not None and {e.dst for e in got.edges} == {t1.id}
    assert dict(got.holds) == t2.marker_versions()
    f2 = t2.commit_async()
    t1.commit()
    f2.result(timeout=30)


def test_a_cycle_through_a_one_marker_transaction_is_broken_by_the_shorter_one(lh):
    """T1 holds t0, S (one marker) queues behind it in t0, T2 holds t1 and queues in t0 behind both;
    T1 then queues behind T2 in t1. The cycle T1 -> T2 -> S -> T1 needs S's edges (never exposed),
    but T2 -> T1 exists too: T1 finds T1 -> T2 -> T1 and shifts, and all three commit."""
    p = "repeatable_read"
    t1, s, t2 = lh.begin(p, timeout_s=20), lh.begin(p, timeout_s=20), lh.begin(p, timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    add_kv(s, "t0", 2, 1)
    add_kv(t2, "t1", 1, 1)
    add_kv(t2, "t0", 3, 1)
    assert read_edges(lh.store, s.id) is None
    add_kv(t1, "t1", 2, 1)  # closes the cycle: T1 shifts its t0 marker above T2's
    assert t1.dag().shifts, t1.dag().to_json()
    futures = [t.commit_async() for t in (t2, s)]
    t1.commit()
    for f in futures:
        f.result(timeout=30)
    assert committed_kv(lh, "t0") == {1: 1.0, 2: 1.0, 3: 1.0}
    assert committed_kv(lh, "t1") == {1: 1.0, 2: 1.0, 3: 0.0}


def test_a_writer_reads_the_log_file_and_marker_of_a_version_below_it_at_once(lh):
    """T2 claims behind T1's pending marker at ``v``: it learns what ``v`` is in one round trip, the
    log file and the marker object read together (fails on the code before: the marker was read only
    after the log's answer, so the two GETs never overlap and the barrier breaks)."""
    t1, t2 = lh.begin("serializable", timeout_s=20), lh.begin("serializable", timeout_s=20)
    add_kv(t1, "t0", 1, 1)
    v = t1.marker_versions()["t0"]
    both = threading.Barrier(2, timeout=5)
    store: Any = lh.store
    real = store._request

    def record(kind: str, key: str, call: Callable[[], Any]) -> Any:
        if kind == "GET" and key.endswith(f"/{v:020d}.json") and "t0" in key:
            both.wait()  # the log file's GET and the marker object's GET must be in flight together
        return real(kind, key, call)

    store._request = record
    try:
        add_kv(t2, "t0", 2, 10)
    finally:
        store._request = real
    assert not both.broken
    f2 = t2.commit_async()
    t1.commit()
    f2.result(timeout=30)
    assert committed_kv(lh, "t0") == {1: 1.0, 2: 10.0, 3: 0.0}
