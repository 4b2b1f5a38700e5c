"""Issue 19: serializable without needless aborts.

- a read-only transaction that read one global version commits however many versions the log
  published since (they are ordered after it); commits outside the log that changed what it read
  still abort it once (and are caught up);
- R1 at the granularity of what was read: a writer commits when no newer version changed the files
  it read or added rows its predicates may match; write skew (each reads what the other writes) and
  outdated reads still abort, and the abort names the version, the transaction and the change;
- ``slack`` counts the newer versions that changed what was read.
"""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest

import lv_core
from lv_core.engine import arrow_ops as ops
from lv_core.engine.arrow_io import read_data_files
from lv_core.errors import TransactionAborted
from lv_core.txn.ops import Operation, OpResult
from tests.helpers.bank import add_kv, committed_kv, logged_xy, read_kv, write_kv


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    return logged_xy(str(tmp_path / "wh"), {1: 100.0, 2: 200.0})


def _may_hold(key: int):
    def match(add) -> bool:
        s = json.loads(add.stats) if add.stats else {}
        lo, hi = s.get("minValues", {}).get("id"), s.get("maxValues", {}).get("id")
        return lo is None or hi is None or int(lo) <= key <= int(hi)

    return match


def point_read(table: str, key: int) -> Operation:
    """A point read with data skipping: reads only the files that may hold ``key``."""
    match = _may_hold(key)

    def run(ctx) -> OpResult:
        snap = ctx.snapshot(table)
        files = [f for f in ctx.files(table).values() if match(f)]
        data = read_data_files(ctx.store, table, files, snap.schema, snap.partition_columns)
        vals = data.filter(pc.equal(data["id"], key))["val"].to_pylist()
        return OpResult(value=vals[0] if vals else None, reads={table: {f.path for f in files}}, scans={table},
                        may_match={table: match})

    return Operation("read", (table,), run, logical={"read": table, "key": key}, exposed=True)


def _outcome(txn) -> str:
    try:
        txn.commit()
        return "committed"
    except TransactionAborted as e:
        return e.rule


def test_read_only_at_one_global_version_commits_after_newer_versions(lh):
    r = lh.begin("serializable")
    x, y = read_kv(r, "x", 1)[1], 0.0
    for _ in range(3):  # three transfers published after r's global version
        w = lh.begin("serializable")
        add_kv(w, "x", 1, -10)
        add_kv(w, "y", 1, +10)
        w.commit()
    y = read_kv(r, "y", 1)[1]
    res = r.commit()
    assert (x, y) == (100.0, 100.0)  # one consistent state: the transfers are ordered after r
    assert "one global version" in res.validation["tables"]["x"]["rules"]["R1"]["detail"] or \
        res.validation["tables"]["x"]["rules"]["R1"]["passed"]


def test_write_serializable_and_snapshot_unchanged_for_readers(lh):
    for preset in ("write_serializable", "snapshot"):
        r = lh.begin(preset)
        read_kv(r, "x", 1)
        w = lh.begin("serializable")
        add_kv(w, "x", 1, 1)
        w.commit()
        read_kv(r, "y", 1)
        assert _outcome(r) == "committed"


def test_writer_whose_reads_nobody_changed_commits(lh):
    t1 = lh.begin("serializable")
    seen = t1.execute(point_read("x", 2))  # reads only the file of x.2
    t2 = lh.begin("serializable")
    add_kv(t2, "x", 1, 5)  # rewrites the file of x.1 only
    t2.commit()
    write_kv(t1, "y", 1, seen)
    res = t1.commit()
    r1 = res.validation["tables"]["x"]["rules"]["R1"]
    assert r1["applies"] and r1["passed"] and "changed what it read: none" in r1["detail"]
    assert committed_kv(lh, "y") == {1: 200.0} and committed_kv(lh, "x") == {1: 105.0, 2: 200.0}


def test_writer_whose_read_was_changed_aborts_with_the_change_named(lh):
    t1 = lh.begin("serializable")
    seen = t1.execute(point_read("x", 1))
    t2 = lh.begin("serializable", name="changer")
    add_kv(t2, "x", 1, 5)
    t2.commit()
    write_kv(t1, "y", 1, seen)
    with pytest.raises(TransactionAborted) as ei:
        t1.commit()
    e = ei.value
    assert e.rule == "R1"
    changes = e.details["validation"]["tables"]["x"]["changes"]
    assert len(changes) == 1 and changes[0]["txn"] == t2.id and changes[0]["files"]
    assert f"committed by transaction {t2.id}" in e.reason and "files it read or rewrote were changed" in e.reason
    assert committed_kv(lh, "y") == {1: 100.0}


def test_write_skew_across_tables_still_aborts(lh):
    t1, t2 = lh.begin("serializable"), lh.begin("serializable")
    for t in (t1, t2):
        assert t.execute(point_read("x", 1)) + t.execute(point_read("y", 1)) == 200.0
    write_kv(t1, "x", 1, -50)
    write_kv(t2, "y", 1, -50)
    assert [_outcome(t1), _outcome(t2)] == ["committed", "R1"]
    assert committed_kv(lh, "x")[1] + committed_kv(lh, "y")[1] == 50.0


def test_phantom_insert_matching_a_predicate_aborts_and_a_non_matching_one_does_not(lh):
    import pyarrow as pa

    for key, inserted, expect in ((7, 7, "R1"), (8, 9, "committed")):
        t1 = lh.begin("serializable")
        assert t1.execute(point_read("x", key)) is None
        t2 = lh.begin("serializable")
        t2.execute(ops.append("x", pa.table({"id": pa.array([inserted], pa.int64()), "val": [1.0]})))
        t2.commit()
        add_kv(t1, "y", 1, 1)
        assert _outcome(t1) == expect, key


def test_slack_counts_versions_that_changed_what_was_read(lh):
    def run(slack):
        t1 = lh.begin("serializable", slack=slack)
        seen = t1.execute(point_read("x", 1))
        for d in (1, 2):
            w = lh.begin("serializable")
            add_kv(w, "x", 1, d)
            w.commit()
        for _ in range(3):  # versions of x that do not touch x.1
            w = lh.begin("serializable")
            add_kv(w, "x", 2, 1)
            w.commit()
        write_kv(t1, "y", 1, seen)
        return _outcome(t1)

    assert run(1) == "R1"  # two changing versions > slack 1
    assert run(2) == "committed"  # five newer versions, two changed what it read: within slack 2
