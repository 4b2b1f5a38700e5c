"""LV[CT] marker shifts in many-table insert workloads (benchmarks/multitable at 0 ms, 2026-11-27).

Blind appends wait at commit since the log became write-once, so a transaction overtaken after it
placed markers in m tables is in a real cycle with the one that overtook it, entering it in each of
the m tables. One shift must break them all: one table per shift used up ``max_shifts`` (8) and
aborted the transaction as ``deadlock``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lv_core
from lv_core import events as ev
from lv_core.engine import arrow_ops
from lv_core.protocol.markers import read_version

CT = "repeatable_read"  # R + CT

pytestmark = pytest.mark.usefixtures("log_immutability")


def _insert(txn: lv_core.Transaction, table: str, row: int) -> None:
    txn.execute(arrow_ops.append(table, pa.table({"id": pa.array([row], pa.int64())})))


def _rows(lh: lv_core.Lakehouse, table: str) -> list[int]:
    import deltalake

    return sorted(deltalake.DeltaTable(lh.store.url(table)).to_pyarrow_table()["id"].to_pylist())


@pytest.mark.parametrize("m", [3, 8])
def test_one_shift_breaks_the_cycles_of_an_overtake_across_m_tables(tmp_path, m):
    """T1 inserts into t0..t{m-1}, T2 queues behind it there, then T2 reaches t{m} first: T1 queueing
    behind T2 there closes m cycles (T2 -> T1 at each of t0..t{m-1}). T1 shifts its m markers at
    once and both commit (T2 first, without waiting). On the code before: m shifts of one table
    each, and at m = 8 the transaction aborted (rule deadlock, 'could not break a dependency cycle')."""
    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=0.05)
    tables = [f"t{i}" for i in range(m + 1)]
    for t in tables:
        lh.create_table(t, "id BIGINT")
    t1, t2 = lh.begin(CT, timeout_s=20), lh.begin(CT, timeout_s=20)
    for t in tables[:-1]:
        _insert(t1, t, 1)
    for t in tables[:-1]:
        _insert(t2, t, 2)  # T2 -> T1 in every table so far
    _insert(t2, tables[-1], 2)  # T2 first in the last table
    before = t1.marker_versions()
    _insert(t1, tables[-1], 1)  # T1 -> T2 there: m cycles
    shifts = [e for e in t1.events.history if isinstance(e, ev.Shifted)]
    assert len(shifts) == 1 and {t for t, _, _ in shifts[0].moves} == set(tables[:-1])
    after, theirs = t1.marker_versions(), t2.marker_versions()
    for t in tables[:-1]:
        assert read_version(lh.store, t, before[t]).kind == "freed"
        assert after[t] > theirs[t]  # T1 behind T2 everywhere now
    assert len(t1.dag().to_json()["cycles"]) == m
    r2 = t2.commit()  # nothing of T1's before it any more
    r1 = t1.commit()
    assert all(r1.versions[t] > r2.versions[t] for t in tables)
    assert all(_rows(lh, t) == [1, 2] for t in tables)


def test_a_waiter_shifts_every_table_where_the_cycles_enter_it_at_once(tmp_path):
    """While waiting at commit (rule IV's periodic check): T1 waits behind T2 in c, and T2's edges
    object says T2 waits behind T1 in a and b. One shift moves both a and b (on the code before: a
    only, and b's cycle needed a second check and shift)."""
    from lv_core.protocol.dag import Edge
    from lv_core.protocol.edges import write_edges
    from lv_core.txn import waiting

    lh = lv_core.connect(str(tmp_path / "wh"), lease_s=10.0, cycle_check_s=1000, shift_after_s=1000)
    for t in ("a", "b", "c"):
        lh.create_table(t, "id BIGINT")
    t1, t2 = lh.begin(CT, timeout_s=20), lh.begin(CT, timeout_s=20)
    _insert(t2, "c", 2)
    for t in ("a", "b", "c"):
        _insert(t1, t, 1)
    held, theirs = t1.marker_versions(), t2.marker_versions()
    write_edges(lh.store, t2.id, [Edge(t2.id, t1.id, t, held[t]) for t in ("a", "b")], theirs)
    core = t1.core
    with pytest.raises(waiting.Restart):
        waiting._check_while_waiting(core, core.book.tables["c"], theirs["c"], t2.id, waited_s=0.0)
    assert [sorted(s["tables"]) for s in core.book.shifts] == [["a", "b"]]
    now = t1.marker_versions()
    assert now["a"] > held["a"] and now["b"] > held["b"] and now["c"] == held["c"]
    t1.rollback()
    t2.rollback()
