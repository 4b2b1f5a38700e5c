"""A marker table that a redo leaves unwritten was read below its marker, past commits made outside the
global log: the global version the transaction publishes names it at the version read, so those commits
are caught up before the transaction (docs/PROTOCOL.md, "Special cases")."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lv_core
from lv_core.blackbox.checker import check
from lv_core.blackbox.history import MicroOp, Outcome, Txn
from lv_core.engine import arrow_ops as ops
from tests.helpers.bank import add_kv, committed_kv, logged_xy, read_kv


@pytest.fixture
def lh(tmp_path) -> lv_core.Lakehouse:
    return logged_xy(str(tmp_path / "wh"), {1: 100.0, 5: 500.0})


def _append_blindly(lh: lv_core.Lakehouse) -> None:
    """A blind serializable writer of x (row 7): its global version names x past F."""
    w = lh.begin("serializable")
    w.execute(ops.append("x", pa.table({"id": pa.array([7], pa.int64()), "val": pa.array([7.0], pa.float64())})))
    w.commit()


def _txn(tid: str, process: int, *ops_: MicroOp, preset: str = "serializable") -> Txn:
    return Txn(tid, process, tuple(ops_), Outcome.OK, preset=preset)


@pytest.mark.parametrize("preset", ["serializable", "snapshot", "write_serializable"])
def test_a_redo_that_leaves_a_marker_table_unwritten_publishes_the_version_it_read(lh, preset):
    """X updates row 5 of x and row 1 of y; a plain commit F deletes row 5 before X commits, so X's redo
    writes nothing to x: X ran after F. Y then reads at X's global version (X's y) and commits read-only
    after a writer W moved x. Before the fix X's global version named x below F: Y saw row 5 (before F)
    and X's y (after X, hence after F), a cycle F -> X -> Y -> F that Y's validation no longer sees once
    W's global version names x past F (G-single in the black-box checker, fails on the code before)."""
    h = lh.global_state().tables["x"]
    x = lh.begin(preset)
    assert read_kv(x, "y", 1) == {1: 100.0}  # the head: x at h
    f = lh.begin("delta")  # outside the global log
    assert f.execute(ops.delete("x", ops.eq("id", 5))) == 1
    f.commit()
    assert add_kv(x, "x", 5, 1.0) == 1  # caught up past F it finds nothing: runs again at h, claims a marker
    assert x.book.tables["x"].marker_version is not None
    add_kv(x, "y", 1, 1.0)
    res = x.commit()
    assert res.redo_count == 1 and "x" not in res.versions  # the redo found row 5 gone: x ends read-only
    marker = x.book.tables["x"].marker_version
    assert marker is not None and marker > h + 1
    # X's global version names x at the version X read (F caught up before X), not at h.
    assert lh.global_state().tables["x"] == marker - 1

    y = lh.begin(preset)
    y_got = read_kv(y, "y", 1)
    x_got = read_kv(y, "x", 5)
    _append_blindly(lh)
    y.commit()

    # The history as a list-append one: key "x/5" records row 5's life (1 created, 2 deleted), "y/1" the
    # increments of row 1. X's update found row 5 deleted: it observed [1, 2].
    history = [
        _txn("setup", 0, MicroOp.append("x/5", 1), MicroOp.append("y/1", 10)),
        _txn("F", 1, MicroOp.read("x/5", [1]), MicroOp.append("x/5", 2), preset="delta"),
        _txn("X", 2, MicroOp.read("x/5", [1, 2]), MicroOp.append("y/1", 11)),
        _txn("Y", 3, MicroOp.read("y/1", [10, 11] if y_got == {1: 101.0} else [10]),
             MicroOp.read("x/5", [1] if x_got == {5: 500.0} else [1, 2])),
    ]
    report = check(history, {"x/5": [1, 2], "y/1": [10, 11]})
    assert report.ok(preset), report.explain()
    assert y_got == {1: 101.0} and x_got == {}
    assert committed_kv(lh, "x") == {1: 100.0, 7: 7.0}


@pytest.mark.parametrize("preset", ["serializable", "write_serializable"])  # (snapshot allows G2-item)
def test_a_redo_that_leaves_nothing_to_write_orders_the_commits_it_read_before_it(lh, preset):
    """X reads y and updates row 5 of x; F deletes row 5 first, so X's redo writes nothing at all: X is
    read-only, after F. Z then overwrites the y X read (after X), Z2 reads Z's y and row 5 at Z's global
    version (before F) and commits read-only after W's global version named x past F: F -> X -> Z -> Z2 -> F
    (G2-item in the black-box checker, fails on the code before). Now X takes the key and publishes a global
    version naming x at the version it read, so Z2 reads x past F."""
    x = lh.begin(preset)
    assert read_kv(x, "y", 1) == {1: 100.0}
    f = lh.begin("delta")
    assert f.execute(ops.delete("x", ops.eq("id", 5))) == 1
    f.commit()
    assert add_kv(x, "x", 5, 1.0) == 1
    res = x.commit()
    assert res.redo_count == 1 and not res.versions
    marker = x.book.tables["x"].marker_version
    assert marker is not None and lh.global_state().tables["x"] == marker - 1  # before: no global version
    z = lh.begin(preset)
    add_kv(z, "y", 1, 1.0)
    z.commit()
    z2 = lh.begin(preset)
    y_got, x_got = read_kv(z2, "y", 1), read_kv(z2, "x", 5)
    _append_blindly(lh)
    z2.commit()
    history = [
        _txn("setup", 0, MicroOp.append("x/5", 1), MicroOp.append("y/1", 10)),
        _txn("F", 1, MicroOp.read("x/5", [1]), MicroOp.append("x/5", 2), preset="delta"),
        _txn("X", 2, MicroOp.read("y/1", [10]), MicroOp.read("x/5", [1, 2])),
        _txn("Z", 3, MicroOp.append("y/1", 11)),
        _txn("Z2", 4, MicroOp.read("y/1", [10, 11] if y_got == {1: 101.0} else [10]),
             MicroOp.read("x/5", [1] if x_got == {5: 500.0} else [1, 2])),
    ]
    report = check(history, {"x/5": [1, 2], "y/1": [10, 11]})
    assert report.ok(preset), report.explain()
