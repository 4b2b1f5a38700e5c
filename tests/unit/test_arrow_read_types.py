"""The Arrow data path's file reading (issue 17 item 3), without Spark: every fixture of
:mod:`tests.helpers.delta_fixtures` at every listed version reads as the independent reader reads it,
and partition value strings parse per the Delta spec (bad ones are LvErrors)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import lv_core
from lv_core.delta.stats import parse_partition_value, spark_partition_text, timestamp_bounds
from lv_core.engine.arrow_io import read_data_files
from lv_core.errors import DeltaLogError, SchemaError
from lv_core.storage.local import LocalStore
from tests.helpers.delta_fixtures import BUILDERS, canonical_rows, check_fixture, expected_rows

UTC = dt.timezone.utc


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_arrow_reads_every_fixture_version_like_the_independent_reader(tmp_path: Path, name: str) -> None:
    fx = BUILDERS[name](tmp_path)
    check_fixture(fx)
    lh = lv_core.Lakehouse(LocalStore(tmp_path))
    try:
        for v in fx.versions:
            snap = lh.snapshot(name, v)
            got = read_data_files(lh.store, name, list(snap.files.values()), snap.schema, snap.partition_columns)
            assert got.schema == snap.schema.to_arrow()
            assert canonical_rows(got, fx.key) == expected_rows(fx, v), f"{name} at version {v}"
    finally:
        lh.close()


@pytest.mark.parametrize("text, dtype, value", [
    ("2021-09-08 11:11:11", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),  # no zone: UTC
    ("2021-09-08 11:11:11.5", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, 500000, tzinfo=UTC)),
    ("2021-09-08T11:11:11.000001Z", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, 1, tzinfo=UTC)),
    ("2021-09-08T13:11:11+02:00", "timestamp", dt.datetime(2021, 9, 8, 11, 11, 11, tzinfo=UTC)),
    ("9999-12-31 23:59:59.999999", "timestamp_ntz", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
    ("0001-01-01", "date", dt.date(1, 1, 1)),
    ("-12.30", "decimal(5,2)", Decimal("-12.30")),
    ("ab", "binary", b"ab"),
    ("TRUE", "boolean", True),
    ("-9223372036854775808", "long", -(2 ** 63)),
    ("-0.0", "double", -0.0),
    ("", "string", None),  # Delta: an empty partition value is null, for every type
    ("", "long", None),
    (None, "timestamp", None),
    ("__HIVE_DEFAULT_PARTITION__", "date", None),
])
def test_partition_values_parse_per_type(text: str | None, dtype: str, value: object) -> None:
    assert parse_partition_value(text, dtype) == value


@pytest.mark.parametrize("text, dtype", [("yes", "boolean"), ("1.5", "long"), ("2021-13-01", "date"),
                                         ("NaN", "decimal(5,2)"), ("2021-09-08 11:11:11Z", "timestamp_ntz"),
                                         ("x", "timestamp"), ("1", "variant")])
def test_bad_partition_values_are_clear_errors(text: str, dtype: str) -> None:
    with pytest.raises(DeltaLogError, match="partition value"):
        parse_partition_value(text, dtype)


def test_spark_partition_text_names_the_zone_of_timestamps() -> None:
    assert spark_partition_text("2021-09-08 11:11:11", "timestamp") == "2021-09-08 11:11:11+00:00"
    assert spark_partition_text("2021-09-08T11:11:11.5Z", "timestamp") == "2021-09-08 11:11:11.500000+00:00"
    assert spark_partition_text("2021-09-08 11:11:11", "timestamp_ntz") == "2021-09-08 11:11:11"
    assert spark_partition_text("1.50", "decimal(3,2)") == "1.50"
    assert spark_partition_text("", "date") is None


def test_timestamp_stats_leave_out_a_maximum_past_year_9999() -> None:
    last = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
            - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    assert timestamp_bounds(0, last, True) == ("1970-01-01T00:00:00.000Z", None)
    assert timestamp_bounds(0, last - 999, False) == ("1970-01-01T00:00:00.000", "9999-12-31T23:59:59.999")


def test_a_bad_partition_value_in_the_log_is_a_clear_error(tmp_path: Path) -> None:
    fx = BUILDERS["partitions_handwritten"](tmp_path)
    lh = lv_core.Lakehouse(LocalStore(tmp_path))
    try:
        snap = lh.snapshot(fx.path.name, 0)
        add = next(iter(snap.files.values()))
        bad = dataclasses.replace(add, partition_values={**add.partition_values, "d": "not-a-date"})
        with pytest.raises(DeltaLogError, match="not-a-date"):
            read_data_files(lh.store, fx.path.name, [bad], snap.schema, snap.partition_columns)
        read_data_files(lh.store, fx.path.name, list(snap.files.values()), snap.schema, snap.partition_columns)
    finally:
        lh.close()


def test_binary_partition_values_round_trip_or_are_refused(tmp_path: Path) -> None:
    from lv_core.delta.writer import write_data_files

    lh = lv_core.Lakehouse(LocalStore(tmp_path))
    try:
        lh.create_table("t", "id BIGINT, b BINARY", partition_by=["b"])
        snap = lh.snapshot("t")
        data = pa.table({"id": pa.array([1, 2], pa.int64()), "b": pa.array(["ü".encode(), b"ab"])})
        adds = write_data_files(lh.store, "t", snap, data)
        assert sorted(a.partition_values["b"] for a in adds) == ["ab", "ü"]
        back = read_data_files(lh.store, "t", adds, snap.schema, snap.partition_columns)
        assert sorted(back.column("b").to_pylist()) == [b"ab", "ü".encode()]
        before = sorted(p.name for p in (tmp_path / "t").rglob("*"))
        with pytest.raises(SchemaError, match="not UTF-8"):
            write_data_files(lh.store, "t", snap, pa.table({"id": pa.array([3], pa.int64()), "b": [b"\xff"]}))
        assert sorted(p.name for p in (tmp_path / "t").rglob("*")) == before  # nothing written
    finally:
        lh.close()


def test_binary_partition_values_from_spark_rows() -> None:
    from lv_core.delta.stats import serialize_partition_value

    assert serialize_partition_value(bytearray(b"ab")) == "ab"  # pyspark gives BINARY values as bytearray
