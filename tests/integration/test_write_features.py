"""Spark tier, issue 17 item 4: LakeVilla writes to tables that use writer features (fixtures built by
delta-rs or by hand in :mod:`tests.helpers.feature_fixtures`), on both data paths. What LakeVilla writes
is read back by delta-rs; a refused or failed statement names the feature or rule, says what to do,
and leaves the table exactly as it was (same version, same files, same rows; no staged file left).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.engine import api
from lv_core.errors import ConstraintViolation, UnsupportedFeature
from lv_core.txn.cleaner import drain
from tests.helpers import feature_fixtures as ff

pytestmark = pytest.mark.spark


def connect(spark: Any, wh: Path, data_path: str) -> lv_core.Lakehouse:
    lh = lv_core.connect(wh, spark=spark)
    api.configure(lh, data_path=data_path)
    return lh


def leftovers(root: Path, txn: Any) -> list[str]:
    drain(60.0)  # staged files of finished transactions are deleted in the background
    return [str(p) for p in root.rglob("*") if txn.id in p.name]


def refused(lh: lv_core.Lakehouse, root: Path, run: Callable[[Any], Any], error: type, *patterns: str) -> str:
    """``run(txn)`` raises ``error`` whose message has every pattern; the table is unchanged."""
    before = ff.delta_state(root)
    txn = lh.begin()
    with pytest.raises(error) as e:
        run(txn)
    msg = str(e.value)
    for p in patterns:
        assert p in msg, f"{p!r} not in {msg!r}"
    txn.rollback()
    assert ff.delta_state(root) == before
    assert leftovers(root, txn) == []
    return msg


def test_append_only_accepts_inserts_and_refuses_changes(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "ao"
    ff.append_only_table(root)
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        with lh.transaction() as txn:
            txn.insert("ao", [{"id": 4, "v": "d"}])
            txn.sql("INSERT INTO ao VALUES (5, 'e')")
        want = ff.ROWS + [{"id": 4, "v": "d"}, {"id": 5, "v": "e"}]
        assert ff.delta_rows(root) == want
        for run in (lambda t: t.update("ao", {"v": "'z'"}, "id = 1"),
                    lambda t: t.delete("ao", "id = 2"),
                    lambda t: t.sql("DELETE FROM ao WHERE id = 3"),
                    lambda t: t.sql("UPDATE ao SET v = 'q' WHERE id > 3"),
                    lambda t: t.sql("MERGE INTO ao USING (SELECT 1 AS id, 'm' AS v) s ON ao.id = s.id "
                                    "WHEN MATCHED THEN UPDATE SET v = s.v")):
            refused(lh, root, run, UnsupportedFeature, "'ao'", "append-only", "appendOnly", "INSERT")
        # a MERGE that only inserts keeps the table append-only: allowed
        with lh.transaction() as txn:
            txn.sql("MERGE INTO ao USING (SELECT 6 AS id, 'f' AS v) s ON ao.id = s.id "
                    "WHEN NOT MATCHED THEN INSERT *")
        assert ff.delta_rows(root) == want + [{"id": 6, "v": "f"}]
    finally:
        lh.close()


def test_check_constraints_are_enforced(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "ck"
    ff.check_constraint_table(root)
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        frame = spark.createDataFrame(pa.Table.from_pylist([{"id": 7, "v": "ok"}, {"id": -7, "v": "bad"}],
                                                           schema=ff.SCHEMA).to_pandas())
        for run, rule, row in (
                (lambda t: t.insert("ck", [{"id": 8, "v": "ok"}, {"id": -1, "v": "neg"}]), "id_positive", '"id":-1'),
                (lambda t: t.insert("ck", frame), "id_positive", '"id":-7'),
                (lambda t: t.insert("ck", [{"id": None, "v": "null id"}]), "id_positive", '"v":"null id"'),
                (lambda t: t.sql("INSERT INTO ck VALUES (9, 'x')"), "v_not_x", '"id":9'),
                (lambda t: t.update("ck", {"v": "'x'"}, "id = 2"), "v_not_x", '"id":2'),
                (lambda t: t.sql("UPDATE ck SET id = -id WHERE id = 3"), "id_positive", '"id":-3'),
                (lambda t: t.sql("MERGE INTO ck USING (SELECT 1 AS id) s ON ck.id = s.id "
                                 "WHEN MATCHED THEN UPDATE SET v = 'x'"), "v_not_x", '"id":1')):
            msg = refused(lh, root, run, ConstraintViolation, f"CHECK constraint '{rule}'", "'ck'", row,
                          "nothing was written")
            assert "violated by the row" in msg
        with lh.transaction() as txn:
            txn.insert("ck", [{"id": 10, "v": "ten"}])
            txn.sql("UPDATE ck SET v = 'B' WHERE id = 2")
            txn.sql("DELETE FROM ck WHERE id = 1")
        assert ff.delta_rows(root) == [{"id": 2, "v": "B"}, {"id": 3, "v": "c"}, {"id": 10, "v": "ten"}]
        # the constraints are still there for every other writer
        import deltalake

        assert set(deltalake.DeltaTable(str(root)).metadata().configuration) == {
            "delta.constraints.id_positive", "delta.constraints.v_not_x"}
    finally:
        lh.close()


def test_column_invariants_are_enforced(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "inv"
    ff.invariant_table(root, "id < 100")
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        for run, row in ((lambda t: t.insert("inv", [{"id": 100, "v": "big"}]), '"id":100'),
                         (lambda t: t.insert("inv", [{"id": None, "v": "n"}]), '"v":"n"'),  # null violates
                         (lambda t: t.sql("UPDATE inv SET id = id + 200 WHERE id = 1"), '"id":201')):
            refused(lh, root, run, ConstraintViolation, "invariant of column 'id'", "id < 100", row)
        with lh.transaction() as txn:
            txn.insert("inv", [{"id": 99, "v": "ok"}])
        assert ff.delta_rows(root) == ff.ROWS + [{"id": 99, "v": "ok"}]
    finally:
        lh.close()
