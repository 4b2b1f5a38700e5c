"""A serializable write reads the commits made outside the global log at write time (paper, section 4,
"compatibility"; lv_core/txn/current.catch_up): after plain-Delta commits on a table, an UPDATE of it
runs once, on the newest such version, and commits without a redo."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import lv_core
from lv_core import events as ev
from lv_core.delta.actions import AddFile
from lv_core.engine import arrow_ops as ops
from lv_core.errors import TransactionAborted
from lv_core.txn.ops import Operation
from tests.helpers.bank import add_kv, committed_kv, logged_xy, read_kv

PRESETS = ["serializable", "snapshot", "write_serializable"]


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    return logged_xy(str(tmp_path / "wh"), {1: 100.0, 2: 200.0})


def _counted(op: Operation) -> tuple[Operation, list[int]]:
    """``op``, counting its executions."""
    runs: list[int] = []
    inner = op.run

    def run(ctx):  # type: ignore[no-untyped-def]
        runs.append(1)
        return inner(ctx)

    op.run = run
    return op, runs


def _plain_commits(lh: lv_core.Lakehouse, n: int) -> None:
    """``n`` commits outside the global log (preset ``delta``): new rows and an update of row 2."""
    for i in range(n):
        t = lh.begin("delta")
        if i % 2:
            t.execute(ops.update("x", ops.eq("id", 2), ops.add_to("val", 1.0)))
        else:
            t.execute(ops.append("x", pa.table({"id": pa.array([10 + i], pa.int64()),
                                                "val": pa.array([1.0], pa.float64())})))
        t.commit()


def _update_x1(txn: lv_core.Transaction, delta: float) -> list[int]:
    op, runs = _counted(ops.update("x", ops.eq("id", 1), ops.add_to("val", delta)))
    assert txn.execute(op) == 1
    return runs


@pytest.mark.parametrize("preset", PRESETS)
def test_an_update_after_plain_commits_runs_once_without_redo(lh, preset):
    head = lh.global_state().tables["x"]
    _plain_commits(lh, 3)
    txn = lh.begin(preset)
    runs = _update_x1(txn, 5.0)
    res = txn.commit()
    assert runs == [1] and res.redo_count == 0  # before: the update ran again at commit (1 redo)
    assert not [e for e in txn.events.history if isinstance(e, ev.Redo)]
    assert res.versions["x"] == head + 4  # right above the three plain commits
    assert committed_kv(lh, "x") == {1: 105.0, 2: 201.0, 10: 1.0, 12: 1.0}
    assert lh.global_state().tables["x"] == res.versions["x"]


def test_a_writer_in_another_process_is_caught_up_once_the_table_is_known_to_move(lh, tmp_path):
    other = lv_core.connect(str(tmp_path / "wh"), lease_s=5.0)  # writes the process does not see
    _plain_commits(other, 1)
    first = lh.begin("serializable")
    _update_x1(first, 1.0)  # the look finds the table moved (the speculative run is taken back)
    assert first.commit().redo_count == 0
    _plain_commits(other, 2)
    txn = lh.begin("serializable")
    runs = _update_x1(txn, 1.0)
    res = txn.commit()
    assert runs == [1] and res.redo_count == 0
    assert committed_kv(lh, "x") == {1: 102.0, 2: 201.0, 10: 1.0}


def test_an_update_that_writes_nothing_runs_again_where_it_was_read(lh):
    """No marker will hold a table the statement did not write, so nothing would settle its reads up to
    one: it is read where the head names it, as without the catch-up (the statement runs twice)."""
    r = lh.global_state().tables["x"]
    _plain_commits(lh, 2)
    txn = lh.begin("serializable")
    op, runs = _counted(ops.update("x", ops.eq("id", 99), ops.add_to("val", 1.0)))
    assert txn.execute(op) == 0
    ts = txn.book.tables["x"]
    assert ts.marker_version is None and ts.base.version == r and runs == [1, 1]
    add_kv(txn, "y", 1, 1.0)
    with pytest.raises(TransactionAborted) as e:  # as without the catch-up: new rows may match its scan
        txn.commit()
    assert e.value.rule == "R1"
    assert committed_kv(lh, "y") == {1: 100.0}


def test_no_catch_up_past_what_an_earlier_read_saw(lh):
    """A plain commit that changed a row the transaction already returned: the update is not moved past
    it (the read and the update would then see two states); the commit's check aborts, as before."""
    txn = lh.begin("serializable")
    assert read_kv(txn, "x", 2) == {2: 200.0}
    _plain_commits(lh, 2)  # the second one updates row 2
    op, runs = _counted(ops.update("x", ops.eq("id", 2), ops.add_to("val", 1.0)))
    txn.execute(op)
    assert txn.book.tables["x"].base.version == lh.global_state().tables["x"]
    with pytest.raises(TransactionAborted):
        txn.commit()
    assert committed_kv(lh, "x")[2] == 201.0


def _may_hold(key: int):  # type: ignore[no-untyped-def]
    """A file filter from the file's statistics: only files whose id range holds ``key``."""

    def keep(f: AddFile) -> bool:
        stats = json.loads(f.stats or "{}")
        lo, hi = stats.get("minValues", {}).get("id"), stats.get("maxValues", {}).get("id")
        return lo is None or hi is None or lo <= key <= hi

    return keep


def test_an_earlier_read_of_other_rows_lets_the_update_catch_up(lh):
    txn = lh.begin("serializable")
    got = txn.execute(ops.read("x", ops.eq("id", 1), files=_may_hold(1)))
    assert got["val"].to_pylist() == [100.0]
    _plain_commits(lh, 2)  # new row 10, row 2 updated: nothing the read saw
    runs = _update_x1(txn, 5.0)
    res = txn.commit()
    assert runs == [1] and res.redo_count == 0
    assert committed_kv(lh, "x") == {1: 105.0, 2: 201.0, 10: 1.0}


def test_no_catch_up_past_a_validated_commit(lh):
    """Versions validated into the global log after the reader's head stay predecessors (snapshot: the
    first committer wins over them; serializable: redone at commit), never read ahead of time."""
    txn = lh.begin("snapshot")
    read_kv(txn, "y", 1)  # the head is chosen here
    w = lh.begin("serializable")
    add_kv(w, "x", 2, 1.0)
    w.commit()
    _plain_commits(lh, 1)
    r = txn.book.head.tables["x"]
    add_kv(txn, "x", 1, 1.0)
    assert txn.book.tables["x"].base.version == r


@pytest.mark.parametrize("preset", ["serializable", "snapshot"])
def test_lv_i_alone_updates_after_plain_commits_without_aborting(lh, preset):
    """LV[I] without markers: the UPDATE reads past the plain commits, and validation judges the table
    from there (it used to abort: the plain commits added files its predicate may match)."""
    _plain_commits(lh, 3)
    txn = lh.begin(preset, features={"I"})
    runs = _update_x1(txn, 5.0)
    res = txn.commit()
    assert runs == [1] and not txn.book.has_markers()
    assert committed_kv(lh, "x") == {1: 105.0, 2: 201.0, 10: 1.0, 12: 1.0}
    assert lh.global_state().tables["x"] == res.versions["x"]


@pytest.mark.parametrize("preset", ["serializable", "snapshot"])
def test_lv_i_alone_plain_commit_after_the_catch_up_still_conflicts(lh, preset):
    """A plain commit landing after the catch-up that rewrites the row updated: lost update, refused
    (under ``snapshot`` by ``foreign_lost_update`` alone: no R1)."""
    _plain_commits(lh, 2)
    txn = lh.begin(preset, features={"I"})
    _update_x1(txn, 5.0)
    plain = lh.begin("delta")
    plain.execute(ops.update("x", ops.eq("id", 1), ops.add_to("val", 1000.0)))
    plain.commit()
    with pytest.raises(TransactionAborted):
        txn.commit()
    assert committed_kv(lh, "x")[1] == 1100.0
