"""Spark tier, issue 17 item 4 (continued): tables using type widening or identity columns, read and
written by LakeVilla on both data paths (fixtures in :mod:`tests.helpers.feature_fixtures`, built by pyarrow
and hand-written logs). A refused statement names the feature and leaves the table exactly as it was.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lv_core.errors import UnsupportedFeature
from tests.helpers import feature_fixtures as ff
from tests.integration.test_write_features import connect, refused

pytestmark = pytest.mark.spark


def rows(df: Any) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])


@pytest.mark.parametrize("feature", ["typeWidening", "typeWidening-preview"])
def test_type_widened_table_reads_and_writes_the_wide_types(spark: Any, tmp_path: Path, data_path: str,
                                                            feature: str) -> None:
    root = tmp_path / "wh" / "tw"
    ff.type_widened_table(root, feature)
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        with lh.transaction() as txn:
            df = txn.table("tw")
            assert [f.dataType.simpleString() for f in df.schema.fields] == [
                "bigint", "int", "double", "timestamp_ntz", "decimal(12,4)"]
            assert rows(df) == ff.WIDENED_ROWS  # the version-0 file holds int, short, float, date, decimal(5,2)
            # filters on widened columns see the old file's rows (its stats are of the narrow types)
            assert [r["id"] for r in rows(df.where("f = 1.5 OR d = TIMESTAMP_NTZ '1999-12-31 00:00:00'"))] == [1, 2]
            assert txn.sql("SELECT count(*) AS n FROM tw WHERE id < 3 AND m < 1000").collect()[0]["n"] == 2
        new = {"id": 2**40, "s": 2**20, "f": 1e-300, "d": dt.datetime(2030, 1, 1, 1, 2, 3),
               "m": Decimal("99999999.9999")}
        with lh.transaction() as txn:
            txn.insert("tw", [new])
            txn.sql("UPDATE tw SET s = s + 100000 WHERE id = 1")  # rewrites the narrow file in the wide types
            txn.sql("DELETE FROM tw WHERE id = 2")
        version, files = _delta_files(root)
        assert version == 2
        for f in files:  # every file LakeVilla wrote has the wide types
            assert pq.read_schema(f).types[:5] == [w for *_x, w in ff.WIDENED.values()], f
        want = [{**ff.WIDENED_ROWS[0], "s": 100010}, ff.WIDENED_ROWS[2], new]
        got = sorted((r for f in files for r in pq.read_table(f).cast(_wide()).to_pylist()), key=lambda r: r["id"])
        assert got == want
        with lh.transaction() as txn:
            assert rows(txn.table("tw")) == want
        # the type changes are still recorded for every other reader
        import deltalake

        t = deltalake.DeltaTable(str(root))
        assert feature in (t.protocol().reader_features or [])
        assert all("delta.typeChanges" in f.metadata for f in t.schema().fields)
    finally:
        lh.close()


def _wide() -> pa.Schema:
    return pa.schema([pa.field(c, w) for c, (_a, _b, _n, w) in ff.WIDENED.items()])


def _delta_files(root: Path) -> tuple[int, list[str]]:
    import deltalake

    t = deltalake.DeltaTable(str(root))
    return t.version(), sorted(t.file_uris())


def test_identity_column_table_takes_updates_and_deletes_but_refuses_inserts(spark: Any, tmp_path: Path,
                                                                             data_path: str) -> None:
    root = tmp_path / "wh" / "idt"
    ff.identity_table(root)
    identity = ff.identity_metadata(root)
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        frame = spark.createDataFrame(pa.Table.from_pylist([{"id": None, "v": "x"}], schema=ff.SCHEMA).to_pandas())
        inserts = "inserting rows needs generated identity values"
        for run, pattern in (
                (lambda t: t.insert("idt", [{"v": "no id"}]), inserts),
                (lambda t: t.insert("idt", [{"id": 4, "v": "explicit"}]), inserts),
                (lambda t: t.insert("idt", frame), inserts),
                (lambda t: t.sql("INSERT INTO idt (v) VALUES ('d')"), inserts),
                (lambda t: t.sql("MERGE INTO idt USING (SELECT 9 AS id, 'm' AS v) s ON idt.id = s.id "
                                 "WHEN NOT MATCHED THEN INSERT (v) VALUES (s.v)"), inserts),
                (lambda t: t.update("idt", {"id": "id + 10"}, "id = 1"), "cannot be updated"),
                (lambda t: t.sql("UPDATE idt SET id = 7 WHERE id = 2"), "cannot be updated"),
                (lambda t: t.sql("MERGE INTO idt USING (SELECT 1 AS id, 'm' AS v) s ON idt.id = s.id "
                                 "WHEN MATCHED THEN UPDATE SET *"), "cannot be updated")):
            refused(lh, root, run, UnsupportedFeature, "'idt'", "identity column", "identityColumns", pattern,
                    "nothing was")
        with lh.transaction() as txn:
            txn.update("idt", {"v": "'A'"}, "id = 1")
            txn.sql("UPDATE idt SET v = upper(v) WHERE id = 2")
            txn.sql("MERGE INTO idt USING (SELECT 3 AS id, 'm' AS v) s ON idt.id = s.id "
                    "WHEN MATCHED THEN UPDATE SET v = s.v")
        assert ff.delta_rows(root) == [{"id": 1, "v": "A"}, {"id": 2, "v": "B"}, {"id": 3, "v": "m"}]
        with lh.transaction() as txn:
            txn.delete("idt", "id = 1")
            txn.sql("DELETE FROM idt WHERE v = 'm'")
        assert ff.delta_rows(root) == [{"id": 2, "v": "B"}]
        assert ff.identity_metadata(root) == identity  # start, step, high-water mark unchanged
    finally:
        lh.close()


@pytest.mark.parametrize("feature", ["variantType", "variantType-preview"])
def test_variant_table_is_read_by_spark_and_never_written(spark: Any, tmp_path: Path, data_path: str,
                                                          feature: str) -> None:
    root = tmp_path / "wh" / "vt"
    ff.variant_table(root, feature)
    lh = connect(spark, tmp_path / "wh", data_path)
    try:
        if data_path == "direct":
            with lh.transaction() as txn:
                df = txn.table("vt")
                assert [f.dataType.simpleString() for f in df.schema.fields] == ["bigint", "variant"]
                assert [r["j"] for r in rows(df.selectExpr("id", "to_json(j) AS j"))] == ff.VARIANT_JSON
                got = txn.sql("SELECT id, variant_get(j, '$.a', 'int') AS a FROM vt WHERE j IS NOT NULL ORDER BY id")
                assert [tuple(r) for r in got.collect()] == [(1, 1), (2, None)]
        else:
            txn = lh.begin()
            with pytest.raises(UnsupportedFeature) as e:
                txn.table("vt").collect()
            assert all(s in str(e.value) for s in ("'vt'", "VARIANT", "variantType", "direct"))
            txn.rollback()
        for run in (lambda t: t.insert("vt", [{"id": 4}]),
                    lambda t: t.sql("INSERT INTO vt SELECT 4, parse_json('[1]')"),
                    lambda t: t.sql("DELETE FROM vt WHERE id = 1")):
            refused(lh, root, run, UnsupportedFeature, "'vt'", feature, "never writes")
    finally:
        lh.close()
