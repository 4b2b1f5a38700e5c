"""Data skipping from file stats and partition values (lv_core.engine.skipping): pure, no JVM."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from lv_core.delta.actions import AddFile
from lv_core.delta.schema import parse_ddl
from lv_core.delta.stats import compute_stats
from lv_core.engine.skipping import file_filter

SCHEMA = parse_ddl("id BIGINT, v DOUBLE, f FLOAT, amount DECIMAL(10,2), name STRING, day DATE, ts TIMESTAMP, "
                   "ntz TIMESTAMP_NTZ, flag BOOLEAN, region STRING")
ARROW = SCHEMA.to_arrow()


def add_for(rows: list[dict], region: str | None = "eu") -> AddFile:
    """An add whose stats are computed from ``rows`` (as the writer does), partitioned by region."""
    t = pa.Table.from_pylist(rows, schema=ARROW).drop_columns(["region"])
    return AddFile("f.parquet", {"region": region}, 1, 0, True, compute_stats(t))


ROWS = [
    {"id": 10, "v": 1.5, "f": 0.1, "amount": decimal.Decimal("0.10"), "name": "apple", "day": dt.date(2024, 1, 1),
     "ts": dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=dt.timezone.utc), "ntz": dt.datetime(2024, 1, 1),
     "flag": True},
    {"id": 20, "v": 2.5, "f": 0.2, "amount": decimal.Decimal("20.00"), "name": "pear", "day": dt.date(2024, 1, 5),
     "ts": dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), "ntz": dt.datetime(2024, 1, 2), "flag": None},
]
FILE = add_for(ROWS)


@pytest.mark.parametrize(("where", "may"), [
    ("id = 10", True), ("id = 15", True), ("id = 9", False), ("id = 21", False), ("id > 20", False),
    ("id >= 20", True), ("20 < id", False), ("id < 10", False), ("id <= 10", True), ("id BETWEEN 21 AND 30", False),
    ("id BETWEEN 0 AND 10", True), ("id IN (1, 2, 3)", False), ("id IN (1, 20)", True), ("id = -5", False),
    ("id = 10.5", True), ("id = 25.5", False), ("v > 2.5", False), ("v >= 2.5", True),
    ("amount = 0.1", True), ("amount < 0.1", False), ("amount > 20", False),
    ("name = 'banana'", True), ("name = 'zebra'", False), ("name < 'apple'", False), ("name > 'pear'", False),
    ("day = DATE '2024-01-06'", False), ("day = '2024-01-03'", True), ("day < CAST('2024-01-01' AS DATE)", False),
    ("ts > TIMESTAMP '2024-01-02 00:00:01'", False), ("ts >= TIMESTAMP '2024-01-02 00:00:00'", True),
    ("ts > TIMESTAMP '2024-01-02 00:00:00'", True),  # a maximum may be truncated to ms: 1 ms of slack
    ("ts < '2024-01-01 12:00:00.123'", False), ("ts <= '2024-01-01 12:00:00.123'", True),
    ("ntz > TIMESTAMP_NTZ '2024-01-02 00:00:01'", False),
    ("region = 'eu'", True), ("region = 'us'", False), ("region IN ('us', 'asia')", False),
    ("region IS NULL", False), ("region IS NOT NULL", True), ("NOT (region IS NULL)", True),
    ("id = 9 OR region = 'us'", False), ("id = 9 OR name = 'apple'", True), ("id = 10 AND region = 'us'", False),
    ("(id = 9)", False), ("flag IS NULL", True), ("id IS NULL", False), ("id IS NOT NULL", True),
    ("NOT (id = 10)", True), ("id <> 10", True), ("id + 1 = 100", True), ("unknown_col = 1", True),
    ("id = 'x'", True), ("this is not sql (((", True), ("f > 0.2", True), ("f > 0.3", False),
    ("false", False), ("id = 9 AND unknown(1)", False),
])
def test_may_match(where: str, may: bool) -> None:
    assert file_filter(where, SCHEMA, ["region"])(FILE) is may, where


def test_no_predicate_and_missing_stats_keep_everything() -> None:
    assert file_filter(None, SCHEMA, ["region"])(FILE)
    bare = AddFile("g.parquet", {"region": "eu"}, 1, 0, True, None)
    assert file_filter("id = 999", SCHEMA, ["region"])(bare)
    assert not file_filter("region = 'us'", SCHEMA, ["region"])(bare)  # partition values need no stats


def test_all_null_and_empty_files() -> None:
    nulls = add_for([{"id": None}, {"id": None}])
    assert not file_filter("id = 1", SCHEMA, ["region"])(nulls)
    assert file_filter("id IS NULL", SCHEMA, ["region"])(nulls)
    assert not file_filter("id IS NOT NULL", SCHEMA, ["region"])(nulls)
    null_part = add_for([{"id": 1}], region=None)
    assert file_filter("region IS NULL", SCHEMA, ["region"])(null_part)
    assert not file_filter("region = 'eu'", SCHEMA, ["region"])(null_part)


def test_truncated_bounds_stay_safe() -> None:
    long = "m" + "z" * 40  # longer than the 32-character stats prefix: no max is written
    f = add_for([{"id": 1, "name": "a"}, {"id": 2, "name": long}])
    assert file_filter(f"name = '{long}'", SCHEMA, ["region"])(f)
    assert file_filter("name > 'y'", SCHEMA, ["region"])(f)
    # A foreign writer's millisecond-truncated timestamp maximum must not hide the microseconds.
    foreign = AddFile("h.parquet", {"region": "eu"}, 1, 0, True,
                      '{"numRecords":1,"minValues":{"ts":"2024-01-01T00:00:00.123Z"},'
                      '"maxValues":{"ts":"2024-01-01T00:00:00.123Z"},"nullCount":{"ts":0}}')
    assert file_filter("ts = TIMESTAMP '2024-01-01 00:00:00.123456'", SCHEMA, ["region"])(foreign)
