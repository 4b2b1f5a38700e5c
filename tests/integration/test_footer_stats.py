"""Spark tier, issue 20: a direct-path write takes its stats from the Parquet footers Spark wrote
(and its partition values from the folders), never from a second Spark pass over its output.

The footer answer must be exactly what the aggregate over the files (the old way) and
:func:`compute_stats` over the file's rows give, for every column kind, several row groups, NaN and
infinite floats, nulls in nested structs, long strings and escaped partition folders; where a footer
cannot give it (list columns, files from another writer) the write falls back to the aggregate.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lv_core
from lv_core.delta.log import DeltaLog
from lv_core.delta.schema import parse_ddl
from lv_core.delta.stats import compute_stats
from lv_core.engine import api
from lv_core.engine.footer_stats import footer_stats, read_footer
from lv_core.engine.spark_io import STAGING
from lv_core.engine.spark_schema import spark_schema
from lv_core.engine.write_folder import footer_facts, staged_files

pytestmark = pytest.mark.spark

DDL = ("id BIGINT, b TINYINT, sh SMALLINT, i INT, f FLOAT, d DOUBLE, m DECIMAL(10,2), big DECIMAL(20,2), "
       "s STRING, day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, flag BOOLEAN, raw BINARY, "
       "st STRUCT<x: INT, y: STRING, z: STRUCT<w: DOUBLE>>, p STRING, q INT")
#: Rows by id: NaN and infinities in some files only, nulls at every level, strings longer than 32.
SELECT = """
SELECT id, CAST(id % 100 AS TINYINT), CAST(id * 3 AS SMALLINT), CAST(id AS INT) - 500,
  CASE WHEN id = 7 THEN float('NaN') ELSE CAST(id AS FLOAT) / 3 END,
  CASE WHEN id = 1234 THEN double('-Infinity') WHEN id % 97 = 0 THEN NULL ELSE id * 0.25 END,
  CAST(id AS DECIMAL(10,2)) / 8, CAST(id AS DECIMAL(20,2)),
  CASE WHEN id % 50 = 0 THEN repeat('long-', 10) || id WHEN id % 11 = 0 THEN NULL ELSE 'row-' || id END,
  DATE '2020-02-29' + CAST(id AS INT),
  TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id * 1.000123),
  TIMESTAMP_NTZ '1999-12-31 23:59:59' + make_interval(0, 0, 0, 0, 0, 0, id * 0.0005),
  id % 3 = 0, CAST('r' || id AS BINARY),
  CASE WHEN id % 13 = 0 THEN NULL ELSE named_struct('x', CASE WHEN id % 2 = 0 THEN NULL ELSE CAST(id AS INT) END,
       'y', 'y' || id, 'z', named_struct('w', CASE WHEN id = 33 THEN double('NaN') ELSE id / 7.0 END)) END,
  CASE id % 4 WHEN 0 THEN 'a b/c' WHEN 1 THEN 'e=q%21' WHEN 2 THEN NULL ELSE 'über' END,
  CAST(id % 2 AS INT)
FROM range(0, 3000, 1, 3)"""


@pytest.fixture
def lh(spark: Any, tmp_path: Path) -> Any:
    lake = lv_core.connect(str(tmp_path / "wh"))
    yield lake
    lake.close()


def _stage(lh: Any, table: str, parts: list[str], *, row_group_bytes: int = 0) -> tuple[Any, str, Any]:
    """Spark writes the test rows into a staging folder of ``table`` as the engine does; returns the
    engine, the staging key and the table's physical schema."""
    lh.sql(f"CREATE TABLE {table} ({DDL})" + (f" PARTITIONED BY ({', '.join(parts)})" if parts else ""))
    eng = api.engine(lh)
    schema = DeltaLog(lh.store, table).snapshot().schema
    key = f"{table}/{STAGING}/t-{uuid.uuid4().hex[:8]}"
    df = lh.spark.sql(SELECT).toDF(*schema.names)
    df = df.select(*[df[f.name].cast(f.dataType) for f in spark_schema(schema).fields])  # as the engine conforms
    w = df.write
    if row_group_bytes:
        w = w.option("parquet.block.size", row_group_bytes)
    if parts:
        w = w.partitionBy(*parts)
    w.parquet(eng.url(key))
    return eng, key, schema


@pytest.mark.parametrize("parts", [[], ["p"], ["p", "q"]])
def test_footer_facts_equal_the_aggregate_over_the_files(lh: Any, parts: list[str]) -> None:
    eng, key, schema = _stage(lh, "t", parts, row_group_bytes=16 * 1024)
    staged = staged_files(lh.store, key)
    assert staged
    footers = footer_facts(lh.store, key, staged, schema, parts)
    assert footers is not None
    aggregate = eng._aggregate_facts("t", key, staged, schema, parts)
    assert [(r, v, n) for r, v, n, _s in footers] == [(r, v, n) for r, v, n, _s in aggregate]
    assert [json.loads(s) for *_x, s in footers] == [json.loads(s) for *_x, s in aggregate]
    if parts:  # escaped folders read back as the values, the default partition as null
        assert {v["p"] for _r, v, _n, _s in footers} == {"a b/c", "e=q%21", None, "über"}


def test_footer_stats_equal_compute_stats_of_each_file(lh: Any) -> None:
    eng, key, schema = _stage(lh, "t", [], row_group_bytes=16 * 1024)
    root = Path(lh.store.root)
    saw_groups = saw_nan = 0
    for rel, size in staged_files(lh.store, key):
        md = pq.read_metadata(root / key / rel)
        saw_groups = max(saw_groups, md.num_row_groups)
        rows = pq.read_table(root / key / rel)
        saw_nan += pa.compute.sum(pa.compute.is_nan(rows.column("f"))).as_py() or 0
        want = json.loads(compute_stats(rows))
        assert json.loads(footer_stats(md, schema, []) or "null") == want, rel
        # The same answer from a ranged read of the footer through the store (the s3a-cluster case).
        assert json.loads(footer_stats(read_footer(lh.store, f"{key}/{rel}", size), schema, []) or "null") == want
    assert saw_groups > 1 and saw_nan == 1  # the cases above were really exercised


def test_what_a_footer_cannot_give_falls_back(lh: Any, tmp_path: Path) -> None:
    schema = parse_ddl("id BIGINT, v DOUBLE, xs ARRAY<INT>")
    path = tmp_path / "pa.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": [1.0, float("nan")]}), path)  # pyarrow leaves NaN out of bounds
    assert footer_stats(pq.read_metadata(path), parse_ddl("id BIGINT, v DOUBLE"), []) is None
    lh.spark.sql("SELECT 1L AS id, 2.0D AS v, array(1, NULL) AS xs").coalesce(1).write.parquet(f"file:{tmp_path}/o")
    spark_file = next((tmp_path / "o").glob("*.parquet"))
    assert footer_stats(pq.read_metadata(spark_file), schema, []) is None  # Parquet counts null elements


def test_writes_read_no_output_back(lh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """INSERT, UPDATE and DELETE on the direct path never run the aggregate; the stats in the log are
    those of the files; a list column still gets exact stats through the aggregate."""
    eng = api.engine(lh)
    lh.sql(f"CREATE TABLE t ({DDL}) PARTITIONED BY (p)")
    calls: list[str] = []
    real = eng._aggregate_facts
    monkeypatch.setattr(eng, "_aggregate_facts", lambda table, *a: calls.append(table) or real(table, *a))
    lh.sql(f"INSERT INTO t {SELECT}")
    assert eng.data_path == "direct"
    lh.sql("UPDATE t SET d = d + 1 WHERE id % 100 = 0")
    lh.sql("DELETE FROM t WHERE p = 'über' AND id > 2000")
    assert calls == []
    snap = DeltaLog(lh.store, "t").snapshot()
    for f in snap.files.values():
        rows = pq.read_table(Path(lh.store.root) / "t" / f.path)
        assert json.loads(f.stats) == json.loads(compute_stats(rows)), f.path
    assert sum(json.loads(f.stats)["numRecords"] for f in snap.files.values()) == 3000 - sum(
        1 for i in range(2001, 3000) if i % 4 == 3)
    lh.sql("CREATE TABLE l (id BIGINT, xs ARRAY<INT>)")
    lh.sql("INSERT INTO l SELECT id, array(CAST(id AS INT), NULL) FROM range(10)")
    assert calls == ["l"]
    files = DeltaLog(lh.store, "l").snapshot().files.values()
    assert files and all(json.loads(f.stats)["nullCount"] == {"id": 0, "xs": 0} for f in files)


def test_a_rewrite_keeps_the_files_granularity(lh: Any) -> None:
    """Spark packs small files into one task; an UPDATE rewriting them must not merge them into bigger
    files (a later UPDATE of a few rows would then rewrite all of them): no written file gets more rows
    than the largest file rewritten (at least REWRITE_MIN_ROWS)."""
    from lv_core.engine.spark_io import REWRITE_MIN_ROWS

    per_file = REWRITE_MIN_ROWS + 20_000
    lh.sql("CREATE TABLE g (id BIGINT, v DOUBLE)")
    lh.sql(f"INSERT INTO g SELECT id, 0.0 FROM range(0, {4 * per_file}, 1, 4)")
    before = DeltaLog(lh.store, "g").snapshot().files.values()
    assert sorted(f.num_records for f in before) == [per_file] * 4
    lh.sql("UPDATE g SET v = 1.0 WHERE id % 1000 = 0")  # every file
    after = DeltaLog(lh.store, "g").snapshot().files.values()
    assert sum(f.num_records or 0 for f in after) == 4 * per_file
    assert max(f.num_records or 0 for f in after) <= per_file, sorted(f.num_records for f in after)
    got = [tuple(r) for r in lh.sql("SELECT count(*), sum(v) FROM g").collect()]
    assert got == [(4 * per_file, 4 * per_file // 1000 + 1)]
