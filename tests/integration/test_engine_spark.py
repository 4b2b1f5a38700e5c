"""Spark tier: the data plane (lv_core.engine.api / spark_io / spark_ops) on a local folder (Spark reads
and writes the files) and on the S3 test server (data through the client as Arrow).

One embedded Spark Connect server serves the whole session (fixture ``spark``); ``engine_lh`` is a
lakehouse on an instrumented store that also records the key of every GET.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

import lv_core
from lv_core.delta.actions import AddFile, RemoveFile, decode_commit
from lv_core.engine import api, arrow_ops
from lv_core.engine.spark_io import STAGING
from lv_core.engine.spark_schema import spark_schema
from lv_core.errors import ConfigError, EngineError, SchemaError, TransactionAborted
from lv_core.txn.cleaner import drain
from tests.conftest import s3_options_for

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
TYPES_DDL = ("id BIGINT NOT NULL, i INT, sm SMALLINT, ti TINYINT, f FLOAT, d DOUBLE, dec DECIMAL(10,2), "
             "big DECIMAL(38,9), s STRING, tag STRING, b BOOLEAN, bin BINARY, day DATE, ts TIMESTAMP, "
             "ntz TIMESTAMP_NTZ, st STRUCT<a: INT NOT NULL, b: STRING>, arr ARRAY<INT>, m MAP<STRING, INT>")
TYPES_ROWS: list[dict[str, Any]] = [
    {"id": 1, "i": -2147483648, "sm": -32768, "ti": -128, "f": 1.5, "d": -1e300, "dec": Decimal("-12345678.90"),
     "big": Decimal("12345678901234567890123456789.123456789"), "s": "plain", "tag": "a b/c=d%", "b": True,
     "bin": b"\x00\xff", "day": dt.date(1969, 12, 31), "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
     "ntz": dt.datetime(2024, 2, 29, 12, 30, 0, 1), "st": {"a": 1, "b": "x"}, "arr": [1, None, 3], "m": [("k", 1)]},
    {"id": 2},  # every other column null
    {"id": 3, "i": 2147483647, "sm": 7, "ti": 127, "f": -0.25, "d": float("inf"), "dec": Decimal("0.01"),
     "big": Decimal("-1.000000001"), "s": "ü" * 40, "tag": "x", "b": False, "bin": b"", "day": dt.date(2262, 4, 11),
     "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC), "ntz": dt.datetime(1900, 1, 1),
     "st": {"a": 2, "b": None}, "arr": [], "m": []},
    {"id": 4, "i": 0, "d": 0.5, "s": "", "tag": "x", "b": True, "day": dt.date(2024, 1, 1),
     "ts": dt.datetime(2024, 1, 1, 12, tzinfo=UTC), "st": None, "arr": None, "m": [("a", None), ("b", 2)]},
]


# -- helpers ---------------------------------------------------------------------------------------


def delta_rs(lh: lv_core.Lakehouse, table: str, version: int | None = None) -> pa.Table:
    """The table read by delta-rs, an independent Delta reader."""
    import deltalake

    dt_ = deltalake.DeltaTable(lh.store.url(table), version=version,
                               storage_options=lh.store.storage_options_for_deltalake() or None)
    return dt_.to_pyarrow_table()


def rows(t: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    return t.sort_by(key).to_pylist()


def commit_actions(lh: lv_core.Lakehouse, table: str, version: int) -> list[Any]:
    raw = lh.store.inner.get(f"{table}/_delta_log/{version:020d}.json").data  # not counted
    return list(decode_commit(raw))


def adds_removes(lh: lv_core.Lakehouse, table: str, version: int) -> tuple[list[AddFile], list[RemoveFile]]:
    acts = commit_actions(lh, table, version)
    return [a for a in acts if isinstance(a, AddFile)], [a for a in acts if isinstance(a, RemoveFile)]


def table_keys(lh: lv_core.Lakehouse, table: str) -> list[str]:
    drain(60.0)  # a finished transaction's staged files are deleted in the background
    return [m.key for m in lh.store.inner.list(f"{table}/") if "/_delta_log/" not in m.key]


def seed(lh: lv_core.Lakehouse, table: str, data: pa.Table, rows_per_file: int) -> None:
    """One commit adding ``data`` in files of ``rows_per_file`` rows (written by pyarrow)."""
    txn = lh.begin("delta")
    txn.execute(arrow_ops.append(table, data, rows_per_file=rows_per_file))
    txn.commit()


def balances(t: pa.Table) -> dict[int, float]:
    return dict(zip(t["id"].to_pylist(), t["balance"].to_pylist(), strict=False))


# -- reads and writes: every column type, partitioned or not, against delta-rs ---------------------


@pytest.mark.parametrize("partition_by", [None, ["tag", "day"]], ids=["unpartitioned", "partitioned"])
def test_round_trip_of_every_type(engine_lh: lv_core.Lakehouse, spark: Any, partition_by: list[str] | None) -> None:
    lh = engine_lh
    for t in ("via_spark", "via_arrow"):
        lh.create_table(t, TYPES_DDL, partition_by=partition_by)
    snap = lh.snapshot("via_spark")
    expected = pa.Table.from_pylist(TYPES_ROWS, schema=snap.schema.to_arrow())
    frame = spark.createDataFrame(expected, schema=spark_schema(snap.schema))
    if not partition_by:
        frame = frame.coalesce(1)  # one file, so its stats compare with the pyarrow writer's
    with lh.transaction() as txn:
        assert txn.insert("via_spark", frame) == len(TYPES_ROWS)
        assert txn.insert("via_arrow", TYPES_ROWS) == len(TYPES_ROWS)

    want = rows(expected)
    for t in ("via_spark", "via_arrow"):
        df = lh.read(t)
        assert df.schema == spark_schema(snap.schema)  # types and nullability as declared (nested too)
        # pyspark's toArrow cannot convert a null struct holding a NOT NULL field (its own cast
        # refuses it, whatever the source): compare that column through a nullable view.
        assert rows(df.withColumn("st", df["st"].cast("struct<a:int,b:string>")).toArrow()) == want, t
        assert rows(delta_rs(lh, t)) == want, t
    # Both writers describe the same data identically: partition values and stats per file.
    described = {}
    for t in ("via_spark", "via_arrow"):
        files = lh.snapshot(t).files.values()
        described[t] = sorted((json.dumps(f.partition_values, sort_keys=True), json.loads(f.stats)) for f in files)
    assert described["via_spark"] == described["via_arrow"]
    stats = described["via_spark"][0][1] if not partition_by else None
    if stats:
        assert stats["numRecords"] == 4 and stats["minValues"]["ts"] == "1969-12-31T23:59:59.999Z"
        assert stats["maxValues"]["ts"] == "2024-01-01T12:00:00.000Z" and "d" not in stats["maxValues"]
        assert stats["minValues"]["s"] == "" and "s" not in stats["maxValues"]  # 40 chars > 32: no max
        assert stats["nullCount"]["st"] == {"a": 2, "b": 3} and "big" not in stats["minValues"]
    if partition_by:
        values = {json.dumps(f.partition_values, sort_keys=True) for f in lh.snapshot("via_spark").files.values()}
        assert '{"day": null, "tag": null}' in values
        assert '{"day": "1969-12-31", "tag": "a b/c=d%"}' in values
    keys = [k for t in ("via_spark", "via_arrow") for k in table_keys(lh, t)]
    assert [k for k in keys if not k.endswith(".parquet") or STAGING in k] == []  # no _SUCCESS, .crc, staging
    assert len(keys) == sum(len(lh.snapshot(t).files) for t in ("via_spark", "via_arrow"))


def test_empty_tables_and_read_your_writes(engine_lh: lv_core.Lakehouse) -> None:
    lh = engine_lh
    lh.create_table("e", "id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2)", partition_by=["name"])
    empty = lh.read("e")
    assert empty.schema == spark_schema(lh.snapshot("e").schema) and empty.count() == 0
    txn = lh.begin()
    assert txn.table("e").count() == 0
    txn.insert("e", [{"id": 1, "name": "a", "amount": Decimal("1.50")}, {"id": 2, "name": None}])
    mine = txn.table("e")
    assert mine.schema == empty.schema
    assert rows(mine.toArrow()) == [{"id": 1, "name": "a", "amount": Decimal("1.50")},
                                    {"id": 2, "name": None, "amount": None}]
    assert txn.update("e", {"amount": "coalesce(amount, 0) + 1"}, "name IS NULL") == 1
    assert txn.table("e").where("id = 2").first()["amount"] == Decimal("1.00")
    assert txn.update("e", {"name": "'b'"}, "id = 2") == 1  # a partition column: the row moves
    assert {f.partition_values["name"] for f in txn.book.view_files("e").values()} == {"a", "b"}
    assert txn.table("e").where("name = 'b'").count() == 1
    assert lh.read("e").count() == 0  # not committed: invisible
    import pandas as pd

    assert txn.insert("e", pd.DataFrame({"id": [3], "name": ["c"]})) == 1  # missing column -> null
    assert txn.insert("e", pa.table({"id": pa.array([4], pa.int32()), "name": ["c"]})) == 1  # int32 widened
    assert txn.delete("e") == 4  # no predicate: every file removed from metadata alone
    assert txn.book.ops[-1].result.reads == {"e": set()} and txn.table("e").count() == 0
    txn.rollback()
    assert table_keys(lh, "e") == [] and lh.read("e").count() == 0


# -- UPDATE / DELETE: one row in a 200-file table ----------------------------------------------------


def test_one_row_update_and_delete_in_200_files(engine_lh: lv_core.Lakehouse, capsys: Any) -> None:
    lh = engine_lh
    lh.create_table("big", "id BIGINT, v DOUBLE")
    n = 400
    seed(lh, "big", pa.table({"id": pa.array(range(n), pa.int64()), "v": [float(i) for i in range(n)]}), 2)
    snap = lh.snapshot("big")
    assert len(snap.files) == 200
    holder = {i: f.path for f in snap.files.values() for i in range(json.loads(f.stats)["minValues"]["id"],
                                                                    json.loads(f.stats)["maxValues"]["id"] + 1)}
    eng = api.engine(lh)
    report = {}
    for what, target, call in [
        ("update", 115, lambda txn: txn.update("big", {"v": "v * 10"}, "id = 115")),
        ("delete", 246, lambda txn: txn.delete("big", where="id = 246")),
    ]:
        lh.store.reset()
        lh.store.gets.clear()
        scans_before = len(eng.scans)
        t0 = time.monotonic()
        txn = lh.begin()
        assert call(txn) == 1
        result = txn.book.ops[-1].result
        commit = txn.commit()
        elapsed = time.monotonic() - t0
        adds, removes = adds_removes(lh, "big", commit.versions["big"])
        assert [r.path for r in removes] == [holder[target]]  # exactly one file rewritten ...
        assert len(adds) == 1 and adds[0].num_records == (2 if what == "update" else 1)
        assert result.reads == {"big": {holder[target]}}  # ... and only its data was read
        scanned = {p for _t, paths in list(eng.scans)[scans_before:] for p in paths}
        assert scanned == {holder[target]}
        data_gets = [k for k in lh.store.gets if k.endswith(".parquet")]
        assert data_gets == []  # Spark (local) or its Python workers (S3, stream path) read the file
        report[what] = {"seconds": round(elapsed, 2), **{k: v for k, v in lh.store.counts().items() if v}}
    final = rows(delta_rs(lh, "big"))
    assert len(final) == n - 1 and final[115]["v"] == 1150.0 and 246 not in {r["id"] for r in final}
    assert rows(lh.read("big").toArrow()) == final
    assert not [k for k in table_keys(lh, "big") if not k.endswith(".parquet") or STAGING in k]
    with capsys.disabled():
        print(f"\n[{lh.kind}] one-row DML in 200 files: {report}")


# -- the paper's running example (section 2.1) and concurrent deposits ------------------------------


def bank(lh: lv_core.Lakehouse) -> None:
    """Bank x of Figure 1: accounts 1 and 2 with 5000$ each, in files #1 and #2."""
    lh.create_table("bank_x", "id BIGINT NOT NULL, balance DOUBLE")
    with lh.transaction() as txn:
        txn.insert("bank_x", [{"id": 1, "balance": 5000.0}])
        txn.insert("bank_x", [{"id": 2, "balance": 5000.0}])


def test_running_example_check_deposit_withdraw(engine_lh: lv_core.Lakehouse) -> None:
    lh = engine_lh
    bank(lh)
    file_of = {f.partition_values.get("id") or json.loads(f.stats)["minValues"]["id"]: f.path
               for f in lh.snapshot("bank_x").files.values()}
    with lh.transaction() as txn:  # check: account 2
        assert txn.table("bank_x").where("id = 2").first()["balance"] == 5000.0
    with lh.transaction() as txn:  # deposit 50$ to account 1: file #1 -> #3
        assert txn.update("bank_x", {"balance": "balance + 50"}, where="id = 1") == 1
    deposit = lh.version("bank_x")
    adds, removes = adds_removes(lh, "bank_x", deposit)
    assert [r.path for r in removes] == [file_of[1]] and len(adds) == 1
    with lh.transaction() as txn:  # withdraw 200$ from account 2: file #2 -> #4
        assert txn.update("bank_x", {"balance": "balance - 200"}, where="id = 2") == 1
    adds, removes = adds_removes(lh, "bank_x", lh.version("bank_x"))
    assert [r.path for r in removes] == [file_of[2]] and len(adds) == 1
    assert balances(delta_rs(lh, "bank_x")) == {1: 5050.0, 2: 4800.0}
    assert balances(lh.read("bank_x").toArrow()) == {1: 5050.0, 2: 4800.0}
    assert balances(lh.read("bank_x", version=deposit).toArrow()) == {1: 5050.0, 2: 5000.0}


def test_concurrent_deposits_both_apply(engine_lh: lv_core.Lakehouse) -> None:
    lh = engine_lh
    bank(lh)
    both_updated = threading.Barrier(2)

    def deposit() -> Any:
        txn = lh.begin()
        assert txn.update("bank_x", {"balance": "balance + 50"}, "id = 1") == 1
        both_updated.wait(timeout=120)  # both hold a marker and a stale view before either commits
        return txn.commit()

    with ThreadPoolExecutor(2) as pool:
        results = [f.result(timeout=300) for f in [pool.submit(deposit) for _ in range(2)]]
    assert sorted(r.redo_count for r in results) == [0, 1]  # the later one was redone, not lost
    assert balances(delta_rs(lh, "bank_x")) == {1: 5100.0, 2: 5000.0}


@pytest.mark.parametrize("engine_lh", ["local"], indirect=True)  # protocol behaviour: one store is enough
def test_a_changed_exposed_read_aborts(engine_lh: lv_core.Lakehouse) -> None:
    lh = engine_lh
    bank(lh)
    writer = lh.begin(features="R")  # LV[R] alone: the redo decides (no validation rule first)
    writer.update("bank_x", {"balance": "balance - 1"}, "id = 1")  # marker first
    reader = lh.begin(features="R")
    seen = reader.table("bank_x")  # read at the latest version, without the writer's pending change
    assert balances(seen.toArrow()) == {1: 5000.0, 2: 5000.0}
    reader.update("bank_x", {"balance": "balance + 1"}, "id = 2")  # its marker: after the writer's
    writer.commit()
    with pytest.raises(TransactionAborted) as caught:
        reader.commit()
    assert caught.value.rule == "exposed_read"


# -- schema checks and engine configuration ---------------------------------------------------------


@pytest.mark.parametrize("engine_lh", ["local"], indirect=True)  # the checks run before either data path
def test_data_that_does_not_fit_is_refused_and_nothing_is_written(engine_lh: lv_core.Lakehouse, spark: Any) -> None:
    lh = engine_lh
    bank(lh)
    before = sorted(table_keys(lh, "bank_x"))
    txn = lh.begin()
    cases = [
        (lambda: txn.insert("bank_x", spark.createDataFrame([(3, 1.0, 2)], "id long, balance double, nope int")),
         "'nope'"),
        (lambda: txn.insert("bank_x", spark.createDataFrame([(3, "x")], "id long, balance string")), "'balance'"),
        (lambda: txn.insert("bank_x", spark.createDataFrame([(None, 1.0)], "id long, balance double")),
         "'id'.*NOT NULL"),
        (lambda: txn.insert("bank_x", [{"id": 3, "balance": "abc"}]), "'balance'"),
        (lambda: txn.insert("bank_x", [{"id": 3, "nope": 1}]), "'nope'"),
        (lambda: txn.update("bank_x", {"nope": "1"}, "id = 1"), "'nope'"),
        (lambda: txn.update("bank_x", {"balance": "nope + 1"}, "id = 1"), "nope"),
        (lambda: txn.update("bank_x", {"id": "NULL"}, "id = 1"), "'id' is NOT NULL"),
        (lambda: txn.delete("bank_x", "no_such_column = 1"), "no_such_column"),
    ]
    for call, pattern in cases:
        with pytest.raises(SchemaError, match=pattern):
            call()
    with pytest.raises(ConfigError):
        txn.delete("bank_x", "id = = 1")
    assert txn.insert("bank_x", spark.createDataFrame([(3, 7)], "id int, balance int")) == 1  # widening is fine
    assert sorted(table_keys(lh, "bank_x")) == sorted([*before, *[
        f"bank_x/{a.path}" for rec in txn.book.ops for a in rec.result.adds.get("bank_x", ())]])
    txn.rollback()
    assert sorted(table_keys(lh, "bank_x")) == before


def test_the_data_path_is_chosen_once_and_reported(engine_lh: lv_core.Lakehouse, request: Any) -> None:
    lh = engine_lh
    lh.create_table("t", "id BIGINT")
    lh.read("t")
    eng = api.engine(lh)
    assert api.engine(lh) is eng and lh.spark is eng.spark
    if lh.kind == "local":
        assert eng.data_path == "direct" and "embedded" in eng.data_path_reason
        with lh.transaction() as txn:
            txn.insert("t", lh.spark.range(5))  # written by Spark
        # The client path on the same folder sees and changes the same table.
        api.configure(lh, data_path="arrow")
        assert api.engine(lh) is not eng and lh.read("t").count() == 5
        assert api.engine(lh).data_path == "arrow" and "configuration" in api.engine(lh).data_path_reason
        with lh.transaction() as txn:
            assert txn.update("t", {"id": "id + 10"}, "id = 4") == 1
        assert sorted(delta_rs(lh, "t")["id"].to_pylist()) == [0, 1, 2, 3, 14]
        return
    assert eng.data_path == "stream" and "s3a://" in eng.data_path_reason  # Python workers move the data
    # The plain entry point, and forcing Spark-direct where the server cannot reach the bucket.
    inner = lh.store.inner
    options = s3_options_for(inner.endpoint_url)  # the server this lakehouse is on (moto or SeaweedFS)
    plain = lv_core.connect(f"s3://{inner.bucket}/{inner.prefix}", storage_options=options)
    with plain.transaction() as txn:
        txn.insert("t", [{"id": 1}])
    assert plain.read("t").count() == 1 and api.engine(plain).data_path == "stream"
    api.configure(plain, data_path="direct", s3_scheme="s3a")
    with pytest.raises(EngineError, match="cannot reach this storage.*s3a"):
        plain.read("t").count()
    with pytest.raises(ConfigError):
        api.configure(plain, data_path="sideways")
    plain.close()
