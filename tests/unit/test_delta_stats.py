"""File statistics, partition paths/values and the pyarrow data file writer."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lv_core.delta import compute_stats, create_table, partition_path, serialize_partition_value
from lv_core.delta.writer import conform, write_data_files
from lv_core.errors import SchemaError
from lv_core.storage.local import LocalStore


def test_stats_values() -> None:
    t = pa.table({
        "i": pa.array([3, None, -1], pa.int32()),
        "f": [1.5, float("nan"), 2.0],
        "g": [0.5, None, 2.5],
        "s": ["b", "a", None],
        "long": ["x" * 40, "y" * 40, "a"],
        "d": [dt.date(2024, 1, 2), dt.date(2023, 1, 1), None],
        "ts": pa.array([1_000_999, 5, None], pa.timestamp("us", tz="UTC")),
        "ntz": pa.array([1, 2, 3], pa.timestamp("ms")),
        "dec": pa.array([Decimal("1.25"), Decimal("-3.50"), None], pa.decimal128(10, 2)),
        "big": pa.array([Decimal("1"), None, None], pa.decimal128(38, 0)),
        "flag": [True, False, None],
        "st": [{"a": 1, "b": "z"}, None, {"a": 5, "b": None}],
        "arr": [[1], None, []],
    })
    s = json.loads(compute_stats(t))
    assert s["numRecords"] == 3
    mn, mx, nc = s["minValues"], s["maxValues"], s["nullCount"]
    assert (mn["i"], mx["i"]) == (-1, 3)
    assert "f" not in mn and "f" not in mx  # NaN present: no usable bounds
    assert (mn["g"], mx["g"]) == (0.5, 2.5)
    assert (mn["s"], mx["s"]) == ("a", "b")
    assert mn["long"] == "a" and "long" not in mx  # a long maximum is left out, not truncated
    assert (mn["d"], mx["d"]) == ("2023-01-01", "2024-01-02")
    assert (mn["ts"], mx["ts"]) == ("1970-01-01T00:00:00.000Z", "1970-01-01T00:00:01.001Z")  # max rounded up
    assert (mn["ntz"], mx["ntz"]) == ("1970-01-01T00:00:00.001", "1970-01-01T00:00:00.003")
    assert (mn["dec"], mx["dec"]) == (-3.5, 1.25)
    assert "big" not in mn and "flag" not in mn and "arr" not in mn
    assert mn["st"] == {"a": 1, "b": "z"} and mx["st"] == {"a": 5, "b": "z"}
    assert nc == {"i": 1, "f": 0, "g": 1, "s": 1, "long": 0, "d": 1, "ts": 1, "ntz": 0, "dec": 1, "big": 2,
                  "flag": 1, "st": {"a": 1, "b": 2}, "arr": 1}


def test_stats_exclude_and_limit() -> None:
    t = pa.table({"a": [1], "b": [2], "c": [3]})
    s = json.loads(compute_stats(t, exclude=["a"], num_indexed_cols=1))
    assert s["minValues"] == {"b": 2} and s["nullCount"] == {"b": 0}


def test_empty_table_stats() -> None:
    s = json.loads(compute_stats(pa.table({"a": pa.array([], pa.int64())})))
    assert s == {"numRecords": 0, "minValues": {}, "maxValues": {}, "nullCount": {"a": 0}}


@pytest.mark.parametrize("value, text", [
    (None, None), (True, "true"), (7, "7"), (1.5, "1.5"), ("a b", "a b"), (dt.date(2024, 2, 3), "2024-02-03"),
    (dt.datetime(2024, 2, 3, 4, 5, 6, 7), "2024-02-03 04:05:06.000007"),
    (dt.datetime(2024, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=2))), "2024-02-03T02:05:06.000000Z"),
    (Decimal("1.50"), "1.50"),
])
def test_serialize_partition_value(value: object, text: str | None) -> None:
    assert serialize_partition_value(value) == text


def test_partition_path_escaping_matches_spark() -> None:
    assert partition_path([], {}) == ""
    assert partition_path(["p", "q"], {"p": "a b", "q": None}) == "p=a b/q=__HIVE_DEFAULT_PARTITION__"
    assert partition_path(["p", "q"], {"p": "", "q": "x"}) == "p=__HIVE_DEFAULT_PARTITION__/q=x"
    assert partition_path(["p"], {"p": "c/d%=é"}) == "p=c%2Fd%25%3Dé"
    assert partition_path(["p"], {"p": "2021-01-01 10:00:00"}) == "p=2021-01-01 10%3A00%3A00"
    assert partition_path(["a=b"], {"a=b": "+"}) == "a%3Db=+"


def test_write_data_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    snap = create_table(store, "t", "id BIGINT NOT NULL, p STRING, v DOUBLE", partition_by=["p"])
    data = pa.table({"v": [1.0, 2.0, 3.0], "ID": [1, 2, 3], "p": ["x", "x", None]})
    adds = write_data_files(store, "t", snap, data, max_rows_per_file=1)
    assert len(adds) == 3
    for a in adds:
        path = tmp_path / "t" / a.path
        assert path.stat().st_size == a.size
        assert pq.read_schema(path).names == ["id", "v"]
        assert a.num_records == 1
    assert sorted(a.partition_values["p"] or "" for a in adds) == ["", "x", "x"]
    assert write_data_files(store, "t", snap, data.slice(0, 0)) == []


def test_conform_errors() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string())])
    with pytest.raises(SchemaError, match="not in the table: zz"):
        conform(pa.table({"id": [1], "zz": [1]}), schema)
    with pytest.raises(SchemaError, match="'id' is NOT NULL but missing"):
        conform(pa.table({"s": ["a"]}), schema)
    with pytest.raises(SchemaError, match="'id' is NOT NULL but the data has 1 null"):
        conform(pa.table({"id": [1, None]}), schema)
    with pytest.raises(SchemaError, match="'id': cannot convert"):
        conform(pa.table({"id": ["x"]}), schema)
    out = conform(pa.table({"id": [1]}), schema)
    assert out.schema == schema and out.column("s").null_count == 1
