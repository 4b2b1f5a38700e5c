"""S3 + Spark tiers, issue 20 item 4: the ``stream`` data path. The embedded Spark server cannot reach
the S3 test server, so its Python workers read and write the data files (``lv_files`` data source):
the client never GETs nor PUTs a data file, rows match delta-rs, every written file's stats match
the stats computed from the file itself, and the credentials never appear in the plan."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

import deltalake
import pyarrow.parquet as pq
import pytest

import lv_core
from lv_core.delta import DeltaLog
from lv_core.delta.stats import compute_stats
from lv_core.engine import api
from lv_core.storage.instrumented import InstrumentedStore
from lv_core.storage.s3 import S3Store

pytestmark = [pytest.mark.spark, pytest.mark.s3]


class Recording(InstrumentedStore):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.keys: list[tuple[str, str]] = []

    def get(self, key: str, *, byte_range: tuple[int, int] | None = None) -> Any:
        self.keys.append(("GET", key))
        return super().get(key, byte_range=byte_range)

    def put(self, key: str, data: bytes, *, mode: Any = "overwrite") -> str:
        self.keys.append(("PUT", key))
        return super().put(key, data, mode=mode)


@pytest.fixture
def lh(spark: Any, s3_bucket: str, s3_options: dict[str, str]) -> Any:
    store = Recording(S3Store(s3_bucket, "wh", s3_options))
    lake = lv_core.Lakehouse(store)
    yield lake
    lake.close()


def _delta(lh: Any, table: str) -> deltalake.DeltaTable:
    return deltalake.DeltaTable(lh.store.url(table), storage_options=lh.store.storage_options_for_deltalake())


def _rows(lh: Any, table: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in _delta(lh, table).to_pyarrow_table().to_pylist())


def test_stream_path_moves_no_data_through_the_client(lh: Any) -> None:
    lh.sql("CREATE TABLE t (id BIGINT, p STRING, amount DECIMAL(10,2), at TIMESTAMP, d DATE, "
           "s STRUCT<x: INT, y: STRING>) PARTITIONED BY (p)")
    lh.sql("INSERT INTO t SELECT id, CAST(id % 3 AS STRING), CAST(id AS DECIMAL(10,2)) / 4, "
           "TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id), "
           "DATE '2024-01-01' + CAST(id AS INT), "
           "named_struct('x', CAST(id AS INT), 'y', CASE WHEN id % 5 = 0 THEN NULL ELSE 'v' || id END) FROM range(300)")
    eng = api.engine(lh)
    assert eng.data_path == "stream" and "Python workers" in eng.data_path_reason
    lh.sql("UPDATE t SET amount = amount + 1 WHERE id % 7 = 0")
    lh.sql("DELETE FROM t WHERE p = '2' AND id > 200")
    lh.sql("MERGE INTO t USING (SELECT id, 'new' AS p FROM range(295, 305)) s ON t.id = s.id "
           "WHEN MATCHED THEN UPDATE SET amount = 0 "
           "WHEN NOT MATCHED THEN INSERT (id, p, amount, at, d, s) VALUES (s.id, s.p, 1, NULL, NULL, NULL)")
    ours = sorted(tuple(r) for r in lh.sql("SELECT id, amount, at, d, s, p FROM t").collect())
    theirs = _delta(lh, "t").to_pyarrow_table().select(["id", "amount", "at", "d", "s", "p"]).to_pylist()
    deleted = {i for i in range(201, 300) if i % 3 == 2}
    assert len(ours) == len(theirs) == 300 - len(deleted) + len(set(range(295, 305)) - (set(range(300)) - deleted))
    assert [(r[0], r[1]) for r in ours] == sorted((r["id"], r["amount"]) for r in theirs)
    assert {r[0]: r[1] for r in ours}[7] == Decimal("2.75") and {r[0]: r[1] for r in ours}[300] == Decimal("1.00")
    assert {r[0]: r[2] for r in ours}[3] == dt.datetime(2024, 1, 1, 0, 0, 3)

    # No data file passed through the client: it read and wrote only the log (and staging manifests).
    data = [(op, k) for op, k in lh.store.keys if k.endswith(".parquet") and "_delta_log" not in k]
    assert data == [], data[:5]
    assert any("_lv_manifest" in k for _op, k in lh.store.keys)

    # Every file's stats are what the file itself gives.
    snap = DeltaLog(lh.store, "t").snapshot()
    for f in snap.files.values():
        table = pq.read_table(io.BytesIO(lh.store.inner.get(f"t/{f.path}").data))
        assert json.loads(f.stats) == json.loads(compute_stats(table)), f.path


def test_stream_path_unpartitioned_transaction_and_no_credentials_in_plans(lh: Any, s3_options: dict[str, str]) -> None:
    lh.sql("CREATE TABLE a (id BIGINT, v DOUBLE)")
    lh.sql("CREATE TABLE b (id BIGINT, v DOUBLE)")
    lh.sql("INSERT INTO a SELECT id, 100.0 FROM range(1000)")
    lh.sql("INSERT INTO b SELECT id, 0.0 FROM range(1000)")
    with lh.transaction("serializable") as txn:
        txn.sql("UPDATE a SET v = v - 30 WHERE id < 10")
        txn.sql("UPDATE b SET v = v + 30 WHERE id < 10")
    assert sum(r[1] for r in _rows(lh, "a")) + sum(r[1] for r in _rows(lh, "b")) == 100_000.0
    df = lh.read("a")
    plan = df._explain_string(extended=True) if hasattr(df, "_explain_string") else ""
    secret = s3_options["aws_secret_access_key"]
    assert secret not in plan
    server = lv_core.engine.session.local_server()
    assert server is not None
    with open(server.log_path, encoding="utf-8", errors="replace") as f:
        assert secret not in f.read()


def test_without_lv_files_on_the_workers_the_data_moves_as_arrow(lh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose Python workers cannot import lv_core (a cluster without it): the probe fails,
    auto picks the arrow path, and says why."""
    from lv_core.engine.stream_io import StreamFiles
    from lv_core.errors import EngineError

    def no_lv_core(self: StreamFiles) -> None:  # what Spark reports, as the engine's error
        raise EngineError("Spark failed: PythonException: ModuleNotFoundError: No module named 'lv_core'")

    monkeypatch.setattr(StreamFiles, "probe", no_lv_core)
    lh.sql("CREATE TABLE t (id BIGINT)")
    lh.sql("INSERT INTO t VALUES (1), (2)")
    eng = api.engine(lh)
    assert eng.data_path == "arrow" and "cannot run the lv_files data source" in eng.data_path_reason
    assert _rows(lh, "t") == [(1,), (2,)]


def _plan(df: Any) -> str:
    return df._explain_string(extended=True)


def test_stream_reads_only_the_columns_a_statement_names(lh: Any) -> None:
    """The Python data source gets no column pruning from Spark: the SQL layer gives it only the columns
    a statement can name (a SELECT's, an UPDATE/DELETE find pass's), and every column where it must."""
    lh.sql("CREATE TABLE w (id BIGINT, k INT, v DOUBLE, payload_text_col STRING)")
    lh.sql("CREATE TABLE ks (k INT)")
    lh.sql("INSERT INTO w SELECT id, CAST(id % 10 AS INT), CAST(id AS DOUBLE), repeat('x', 50) || id FROM range(2000)")
    lh.sql("INSERT INTO ks VALUES (3), (4)")
    narrow = lh.sql("SELECT count(*), sum(V) FROM w WHERE k < 5")
    assert "payload_text_col" not in _plan(narrow)
    assert [tuple(r) for r in narrow.collect()] == [(1000, float(sum(i for i in range(2000) if i % 10 < 5)))]
    assert "payload_text_col" in _plan(lh.sql("SELECT * FROM w WHERE k < 5"))  # a star needs every column
    assert "payload_text_col" in _plan(lh.sql("SELECT w.* FROM w"))
    # the find pass reads k (and v for SET's type); the rewrite keeps every column
    lh.sql("UPDATE w SET v = v + 0.5 WHERE k IN (SELECT k FROM ks) AND id < 100")
    lh.sql("DELETE FROM w WHERE k = 9")
    rows = {r[0]: r for r in _rows(lh, "w")}
    assert len(rows) == 1800
    assert rows[3] == (3, 3, 3.5, "x" * 50 + "3") and rows[13] == (13, 3, 13.5, "x" * 50 + "13")
    assert rows[103] == (103, 3, 103.0, "x" * 50 + "103") and 9 not in rows
    assert [tuple(r) for r in lh.sql("SELECT count(*) FROM w").collect()] == [(1800,)]
