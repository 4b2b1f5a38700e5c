"""LV[I] through transactions: global-log reads, R1-R3 aborts and their neighbours, write skew,
plain Delta writers behind the log's back, read-only transactions without LIST."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import lv_core
from lv_core import Lakehouse
from lv_core import events as ev
from lv_core.engine import arrow_ops as ops
from lv_core.errors import TransactionAborted
from lv_core.storage.instrumented import InstrumentedStore
from tests.helpers.bank import add_kv, committed_kv, logged_xy, make_kv, read_kv, write_kv


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    lh = logged_xy(str(tmp_path / "wh"), {1: 100.0})
    assert set(lh.global_state().tables) == {"x", "y"}
    return lh


def _append_plain(lh, table: str, key: int, val: float) -> None:
    """A plain Delta writer (delta-rs) appends behind the global log's back."""
    import deltalake

    deltalake.write_deltalake(lh.store.url(table), pd.DataFrame({"id": [key], "val": [val]}), mode="append")


def test_serializable_commit_publishes_a_global_version(lh):
    txn = lh.begin("serializable")
    add_kv(txn, "x", 1, -10)
    add_kv(txn, "y", 1, +10)
    res = txn.commit()
    head = lh.global_state()
    assert res.gvl_version == head.version >= 0
    assert head.tables["x"] == res.versions["x"] and head.tables["y"] == res.versions["y"]
    assert res.validation["compatible"] and set(res.validation["tables"]) == {"x", "y"}
    validated = [e for e in txn.events.history if isinstance(e, ev.Validated)]
    assert validated and validated[0].compatible
    assert committed_kv(lh, "x") == {1: 90.0} and committed_kv(lh, "y") == {1: 110.0}
    # whole-lakehouse time travel: as of the global version before, both tables were untouched
    before = lh.global_state(res.gvl_version - 1) if res.gvl_version > 0 else None
    if before is not None and "x" in before.tables:
        assert lh.snapshot("x", as_of=before.version).version < res.versions["x"]


def _stale_read(lh, slack=None):
    t1 = lh.begin("serializable", slack=slack)
    seen = read_kv(t1, "x", 1)[1]  # read at the global log's version of x
    t2 = lh.begin("serializable")
    add_kv(t2, "x", 1, 1)
    t2.commit()
    write_kv(t1, "y", 1, seen)  # copies the stale x into y
    return t1.commit()


def test_r1_fires_on_an_outdated_read(lh):
    with pytest.raises(TransactionAborted) as ei:
        _stale_read(lh)
    assert ei.value.rule == "R1"
    x = ei.value.details["validation"]["tables"]["x"]
    assert x["rules"]["R1"]["passed"] is False and x["r"] < x["h"]
    assert committed_kv(lh, "y") == {1: 100.0}


def test_r1_neighbour_fresh_read_passes(lh):
    t1 = lh.begin("serializable")
    seen = read_kv(t1, "x", 1)[1]
    write_kv(t1, "y", 1, seen)
    assert t1.commit().validation["tables"]["x"]["rules"]["R1"]["passed"] is True


def test_slack_lets_a_stale_read_pass(lh):
    res = _stale_read(lh, slack=1)
    assert res.validation["tables"]["x"]["rules"]["R1"]["passed"] is True


def test_r2_fires_when_a_plain_writer_takes_a_version_after_the_marker(lh):
    txn = lh.begin("snapshot")
    add_kv(txn, "x", 1, 5)          # marker claimed at w
    _append_plain(lh, "x", 2, 1.0)  # delta-rs commits at w+1, ignoring the marker
    with pytest.raises(TransactionAborted) as ei:
        txn.commit()
    assert ei.value.rule == "R2"
    t = ei.value.details["validation"]["tables"]["x"]
    assert t["rules"]["R2"]["passed"] is False and t["rules"]["R3"]["passed"] is True


def test_r2_neighbour_plain_writer_before_the_marker_is_fine(lh):
    _append_plain(lh, "x", 2, 1.0)  # behind the log's back, but before our marker: a predecessor
    txn = lh.begin("snapshot")
    add_kv(txn, "x", 1, 5)
    res = txn.commit()
    assert committed_kv(lh, "x") == {1: 105.0, 2: 1.0}
    assert lh.global_state().tables["x"] == res.versions["x"]


def test_r3_fires_on_a_lost_update_without_markers(lh):
    t1 = lh.begin("snapshot", features={"I"})  # LV[I] alone: no markers
    t2 = lh.begin("snapshot", features={"I"})
    add_kv(t1, "x", 1, 1)
    add_kv(t2, "x", 1, 2)
    t2.commit()
    with pytest.raises(TransactionAborted) as ei:
        t1.commit()
    assert ei.value.rule == "R3"
    t = ei.value.details["validation"]["tables"]["x"]
    assert t["l"] > t["r"] and t["rules"]["R3"]["passed"] is False
    assert committed_kv(lh, "x") == {1: 102.0}


def test_r3_neighbour_other_table_passes(lh):
    t1 = lh.begin("snapshot", features={"I"})
    t2 = lh.begin("snapshot", features={"I"})
    add_kv(t1, "x", 1, 1)
    add_kv(t2, "y", 1, 2)
    t2.commit()
    t1.commit()
    assert committed_kv(lh, "x") == {1: 101.0} and committed_kv(lh, "y") == {1: 102.0}


def _write_skew(lh, preset):
    """G2-item across two tables: each reads both balances and withdraws from one (constraint x+y>=0)."""
    t1, t2 = lh.begin(preset), lh.begin(preset)
    for t in (t1, t2):
        assert read_kv(t, "x", 1)[1] + read_kv(t, "y", 1)[1] == 200.0
    write_kv(t1, "x", 1, -50)  # each keeps the sum >= 0 on its own view
    write_kv(t2, "y", 1, -50)
    outcomes = []
    for t in (t1, t2):
        try:
            t.commit()
            outcomes.append("committed")
        except TransactionAborted as e:
            outcomes.append(e.rule)
    return outcomes, committed_kv(lh, "x")[1] + committed_kv(lh, "y")[1]


def test_write_skew_commits_under_snapshot(lh):
    outcomes, total = _write_skew(lh, "snapshot")
    assert outcomes == ["committed", "committed"] and total == -100.0  # the anomaly


def test_write_skew_aborted_under_serializable(lh):
    outcomes, total = _write_skew(lh, "serializable")
    assert outcomes == ["committed", "R1"] and total == 50.0


def test_blind_append_takes_the_next_free_version(lh):
    txn = lh.begin("serializable")
    txn.execute(ops.append("x", pa.table({"id": pa.array([7], pa.int64()), "val": [7.0]})))
    _append_plain(lh, "x", 8, 8.0)  # takes the version after our marker
    res = txn.commit()
    assert committed_kv(lh, "x") == {1: 100.0, 7: 7.0, 8: 8.0}
    assert res.validation["tables"]["x"]["moved_from"] is not None


def test_plain_writer_between_start_and_validation_of_a_reader(lh):
    """Documented behaviour: the plain commit is found in the table's log (unknown to the global log),
    counted, and the stale read fails R1; under snapshot isolation the same transaction commits."""
    for preset, expect in (("serializable", "R1"), ("snapshot", "committed")):
        t = lh.begin(preset)
        seen = read_kv(t, "x", 1)[1]
        _append_plain(lh, "x", 100 + len(preset), 1.0)
        write_kv(t, "y", 1, seen)
        try:
            t.commit()
            outcome = "committed"
        except TransactionAborted as e:
            outcome = e.rule
            assert 1 <= len(e.details["validation"]["tables"]["x"]["foreign"])
        assert outcome == expect


def test_read_only_transactions_make_no_list_and_no_writes(tmp_path):
    st = InstrumentedStore(lv_core.connect(str(tmp_path)).store)
    lh = Lakehouse(st)
    for k in range(3):
        make_kv(lh, f"t{k}", {1: 1.0})
    w = lh.begin("serializable")  # puts all three tables into the global log
    for k in range(3):
        add_kv(w, f"t{k}", 1, 1)
    w.commit()
    st.reset()
    r = lh.begin("serializable")
    for k in range(3):
        read_kv(r, f"t{k}")
    res = r.commit()
    c = st.counts()
    assert c["LIST"] == 0
    assert c["PUT"] + c["PUT-create"] + c["PUT-if-match"] + c["DELETE"] == 0
    assert res.versions == {} and res.validation["compatible"]


def test_r1_from_commits_outside_the_log_catches_the_log_up(lh):
    """A serializable reader after a repeatable_read (no LV[I]) commit fails R1 once; the global log
    then includes that commit, so the retry reads it and passes."""
    w = lh.begin("repeatable_read")
    add_kv(w, "x", 1, 7)
    w.commit()
    r = lh.begin("serializable")
    assert read_kv(r, "x", 1)[1] == 100.0  # the global log's (stale) version
    with pytest.raises(TransactionAborted) as ei:
        r.commit()
    assert ei.value.rule == "R1"
    r2 = lh.begin("serializable")
    assert read_kv(r2, "x", 1)[1] == 107.0
    assert r2.commit().validation["compatible"]
