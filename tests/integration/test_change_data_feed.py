"""Spark tier, issue 17 item 4: change data feed tables (``delta.enableChangeDataFeed = true``) get the change
data files the Delta spec requires: LakeVilla's UPDATE, DELETE, MERGE (and a transaction mixing INSERT and
UPDATE) write ``cdc`` actions, and delta-rs's change data feed reader returns exactly the changed rows, on both
data paths. A statement that changes rows its own transaction already wrote is refused, leaving the table as
it was."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.engine import api
from lv_core.errors import UnsupportedFeature
from lv_core.txn.cleaner import drain

deltalake = pytest.importorskip("deltalake")

pytestmark = pytest.mark.spark

ROWS = [{"id": i, "grp": "a" if i % 2 else "b", "v": float(i)} for i in range(1, 7)]


@pytest.fixture(params=["direct", "arrow"])
def data_path(request: pytest.FixtureRequest) -> str:
    return request.param


def _make(root: Path, partitioned: bool) -> None:
    deltalake.write_deltalake(str(root), pa.Table.from_pylist(ROWS), partition_by=["grp"] if partitioned else None,
                              configuration={"delta.enableChangeDataFeed": "true"})


def _changes(root: Path, start: int) -> list[tuple]:
    t = deltalake.DeltaTable(str(root)).load_cdf(starting_version=start)
    t = pa.table(t.read_all() if hasattr(t, "read_all") else t)
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["grp"], r["v"]) for r in t.to_pylist())


def _commit(root: Path, version: int) -> list[dict[str, Any]]:
    text = (root / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _rows(table: Any) -> list[tuple]:
    return sorted((r["id"], r["grp"], r["v"]) for r in table)


@pytest.mark.parametrize("partitioned", [False, True])
def test_update_delete_merge_write_change_files(spark: Any, tmp_path: Path, data_path: str,
                                                partitioned: bool) -> None:
    root = tmp_path / "wh" / "cdf"
    _make(root, partitioned)
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)
    try:
        with lh.transaction() as txn:  # version 1
            assert txn.sql("UPDATE cdf SET v = v + 10 WHERE id = 1").collect()[0][0] == 1
        with lh.transaction() as txn:  # version 2
            assert txn.delete("cdf", where="id = 2") == 1
        with lh.transaction() as txn:  # version 3
            txn.sql("MERGE INTO cdf t USING (SELECT 3 AS id, 'a' AS grp, 33.0 AS v UNION ALL "
                    "SELECT 4, 'b', 0.0 UNION ALL SELECT 10, 'b', 100.0) s ON t.id = s.id "
                    "WHEN MATCHED AND s.id = 4 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v "
                    "WHEN NOT MATCHED THEN INSERT *")
        with lh.transaction() as txn:  # version 4: INSERT and UPDATE of other rows in one commit
            txn.insert("cdf", [{"id": 20, "grp": "a", "v": 20.0}])
            assert txn.update("cdf", set={"v": "v * 2"}, where="id = 5") == 1
            txn.sql("INSERT INTO cdf VALUES (21, 'b', 21.0)")
        with lh.transaction() as txn:  # version 5: INSERT alone: no change files (readers use the adds)
            txn.sql("INSERT INTO cdf VALUES (30, 'b', 30.0)")
        with lh.transaction() as txn:  # version 6: DELETE of everything
            txn.sql("DELETE FROM cdf WHERE grp = 'a'")
        assert lh.version("cdf") == 6
        assert _changes(root, 1) == sorted([
            (1, "update_preimage", 1, "a", 1.0), (1, "update_postimage", 1, "a", 11.0),
            (2, "delete", 2, "b", 2.0),
            (3, "update_preimage", 3, "a", 3.0), (3, "update_postimage", 3, "a", 33.0), (3, "delete", 4, "b", 4.0),
            (3, "insert", 10, "b", 100.0),
            (4, "insert", 20, "a", 20.0), (4, "insert", 21, "b", 21.0),
            (4, "update_preimage", 5, "a", 5.0), (4, "update_postimage", 5, "a", 10.0),
            (5, "insert", 30, "b", 30.0),
            (6, "delete", 1, "a", 11.0), (6, "delete", 3, "a", 33.0), (6, "delete", 5, "a", 10.0),
            (6, "delete", 20, "a", 20.0)])
        for v in (1, 2, 3, 4, 6):
            cdc = [a["cdc"] for a in _commit(root, v) if "cdc" in a]
            assert cdc and all(c["path"].startswith("_change_data/") and c["dataChange"] is False
                               and (root / c["path"]).is_file() and c["size"] > 0 for c in cdc), v
            if partitioned:
                assert all(set(c["partitionValues"]) == {"grp"} for c in cdc)
        assert not [a for a in _commit(root, 5) if "cdc" in a]
        want = _rows(deltalake.DeltaTable(str(root)).to_pyarrow_table().to_pylist())
        assert want == [(6, "b", 6.0), (10, "b", 100.0), (21, "b", 21.0), (30, "b", 30.0)]
        assert _rows(lh.read("cdf").collect()) == want
        # no staged change file left behind (the INSERT-only commit's implied ones were deleted)
        named = {a["cdc"]["path"] for v in range(1, 7) for a in _commit(root, v) if "cdc" in a}
        drain(60.0)  # staged files of finished transactions are deleted in the background
        on_disk = {str(p.relative_to(root)) for p in (root / "_change_data").rglob("*.parquet")}
        assert on_disk == named
    finally:
        lh.close()


def test_changing_rows_twice_in_one_transaction_is_refused(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "cdf"
    _make(root, False)
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)

    def twice(txn: Any) -> None:
        txn.sql("UPDATE cdf SET v = 0 WHERE id = 1")
        txn.sql("UPDATE cdf SET v = 1 WHERE id = 1")  # the row its change file holds as postimage

    def insert_then_delete(txn: Any) -> None:
        txn.insert("cdf", [{"id": 9, "grp": "a", "v": 9.0}])
        txn.delete("cdf", where="id = 9")

    def update_then_merge(txn: Any) -> None:
        txn.update("cdf", {"v": "v + 1"}, where="id = 2")
        txn.sql("MERGE INTO cdf t USING (SELECT 2 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE")

    try:
        for run in (twice, insert_then_delete, update_then_merge):
            txn = lh.begin()
            with pytest.raises(UnsupportedFeature) as e:
                run(txn)
            assert "changeDataFeed" in str(e.value) and "already inserted or changed" in str(e.value)
            txn.rollback()
            assert _rows(deltalake.DeltaTable(str(root)).to_pyarrow_table().to_pylist()) == _rows(ROWS)
            assert _changes(root, 1) == []  # markers come and go; no data or change file was committed
            drain(60.0)
            assert not list(root.rglob(f"*{txn.id}*"))
    finally:
        lh.close()


def test_other_rows_of_a_rewritten_file_change_in_the_same_transaction(spark: Any, tmp_path: Path,
                                                                      data_path: str) -> None:
    root = tmp_path / "wh" / "cdf"
    _make(root, False)  # one data file
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)
    try:
        with lh.transaction() as txn:  # version 1: a transfer, then more changes of other rows of the file
            txn.sql("UPDATE cdf SET v = v - 0.5 WHERE id = 1")
            txn.sql("UPDATE cdf SET v = v + 0.5 WHERE id = 3")
            txn.sql("DELETE FROM cdf WHERE id = 4")
            txn.sql("MERGE INTO cdf t USING (SELECT 5 AS id, 'a' AS grp, 55.0 AS v) s ON t.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET *")
            txn.insert("cdf", [{"id": 8, "grp": "b", "v": 8.0}])
        assert _changes(root, 1) == sorted([
            (1, "update_preimage", 1, "a", 1.0), (1, "update_postimage", 1, "a", 0.5),
            (1, "update_preimage", 3, "a", 3.0), (1, "update_postimage", 3, "a", 3.5),
            (1, "delete", 4, "b", 4.0),
            (1, "update_preimage", 5, "a", 5.0), (1, "update_postimage", 5, "a", 55.0),
            (1, "insert", 8, "b", 8.0)])
        assert _rows(deltalake.DeltaTable(str(root)).to_pyarrow_table().to_pylist()) == _rows(lh.read("cdf").collect())
        _on_disk_equals_named(root)
    finally:
        lh.close()


def _on_disk_equals_named(root: Path) -> None:
    drain(60.0)  # staged files of finished transactions are deleted in the background
    named = {a["cdc"]["path"] for p in sorted((root / "_delta_log").glob("*.json"))
             for a in _commit(root, int(p.stem)) if "cdc" in a}
    on_disk = {str(p.relative_to(root)) for p in (root / "_change_data").rglob("*.parquet")}
    assert on_disk == named


@pytest.mark.parametrize("data_path", ["direct"], indirect=True)
def test_a_redone_update_rewrites_its_change_files(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "cdf"
    _make(root, False)
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)
    both_updated = threading.Barrier(2)

    def deposit() -> Any:
        txn = lh.begin()
        assert txn.update("cdf", {"v": "v + 50"}, "id = 1") == 1
        both_updated.wait(timeout=120)  # both hold a stale view before either commits
        return txn.commit()

    try:
        with ThreadPoolExecutor(2) as pool:
            results = [f.result(timeout=300) for f in [pool.submit(deposit) for _ in range(2)]]
        assert sorted(r.redo_count for r in results) == [0, 1]
        got = [c[1:] for c in _changes(root, 1) if c[2] == 1]
        assert sorted(got) == sorted([("update_preimage", 1, "a", 1.0), ("update_postimage", 1, "a", 51.0),
                                      ("update_preimage", 1, "a", 51.0), ("update_postimage", 1, "a", 101.0)])
        _on_disk_equals_named(root)  # the first run's change files were deleted by the redo
    finally:
        lh.close()


def test_delta_preset_statements_write_their_own_change_files(spark: Any, tmp_path: Path, data_path: str) -> None:
    root = tmp_path / "wh" / "cdf"
    _make(root, True)
    lh = lv_core.connect(tmp_path / "wh", spark=spark)
    api.configure(lh, data_path=data_path)
    try:
        txn = lh.begin("delta")
        txn.sql("INSERT INTO cdf VALUES (7, 'a', 7.0)")  # version 1: adds only
        txn.sql("UPDATE cdf SET v = -1 WHERE id = 7")  # version 2: rewrites the committed file
        txn.sql("DELETE FROM cdf WHERE id = 6")  # version 3
        assert txn.delete("cdf") == 6  # version 4: everything (no metadata-only delete: rows go to change files)
        txn.commit()
        assert _changes(root, 1) == sorted([
            (1, "insert", 7, "a", 7.0), (2, "update_preimage", 7, "a", 7.0), (2, "update_postimage", 7, "a", -1.0),
            (3, "delete", 6, "b", 6.0)] + [(4, "delete", r["id"], r["grp"], r["v"]) for r in ROWS if r["id"] != 6]
            + [(4, "delete", 7, "a", -1.0)])
        assert [a for a in _commit(root, 4) if "cdc" in a]
        assert not [a for a in _commit(root, 1) if "cdc" in a]
        _on_disk_equals_named(root)
    finally:
        lh.close()
