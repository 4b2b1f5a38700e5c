"""Per-file statistics and partition paths for ``add`` actions (pure, Arrow based).

Stats follow the Delta spec: ``{"numRecords", "minValues", "maxValues", "nullCount"}``, nested
like the schema. Only values that a reader can use *safely* for data skipping are written:
min/max for numbers, dates, timestamps (millisecond precision, minimum rounded down, maximum
rounded up), short strings (a longer maximum is left out rather than truncated), decimals up to
15 digits (exact as JSON numbers); no min/max for booleans, binary, lists and maps.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lv_core.delta.paths import HIVE_NULL, partition_folder
from lv_core.errors import DeltaLogError, SchemaError

__all__ = ["HIVE_NULL", "STRING_STATS_PREFIX", "compute_stats", "nest_struct", "parse_partition_value",
           "partition_path", "serialize_partition_value", "spark_partition_text", "timestamp_bounds", "timestamp_stat"]

STRING_STATS_PREFIX = 32
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def timestamp_stat(us: int, tz: bool) -> str:
    """A timestamp (``us`` microseconds since the epoch, shown to the millisecond) as Delta stats
    text: ``2024-01-31T12:00:00.000``, with ``Z`` when ``tz`` (a TIMESTAMP, not a TIMESTAMP_NTZ)."""
    t = _EPOCH + dt.timedelta(microseconds=us)
    s = t.strftime("%Y-%m-%dT%H:%M:%S") + f".{t.microsecond // 1000:03d}"
    return s + "Z" if tz else s


#: The last millisecond a stats timestamp can show (year 9999).
_LAST_MS_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc) - _EPOCH) // dt.timedelta(
    microseconds=1)


def timestamp_bounds(lo_us: int, hi_us: int, tz: bool) -> tuple[Optional[str], Optional[str]]:
    """Stats bounds of timestamps from ``lo_us`` to ``hi_us`` (microseconds since the epoch): the minimum
    rounded down and the maximum rounded up to the millisecond; a maximum that would round past year
    9999 is left out (no bound is safe, a wrong one is not)."""
    hi_ms = -(-hi_us // 1000) * 1000
    return timestamp_stat(lo_us // 1000 * 1000, tz), (timestamp_stat(hi_ms, tz) if hi_ms <= _LAST_MS_US else None)


_US_PER = {"s": 1_000_000, "ms": 1000, "us": 1}


def _floor_us(v: int, unit: str) -> int:
    return v // 1000 if unit == "ns" else v * _US_PER[unit]


def _ceil_us(v: int, unit: str) -> int:
    return -(-v // 1000) if unit == "ns" else v * _US_PER[unit]


def _minmax(col: pa.ChunkedArray) -> Optional[tuple[Any, Any]]:
    t = col.type
    if col.null_count == len(col) or len(col) == 0:
        return None
    if pa.types.is_timestamp(t):
        mm = pc.min_max(col.cast(pa.int64()))
        lo_us, hi_us = _floor_us(mm["min"].as_py(), t.unit), _ceil_us(mm["max"].as_py(), t.unit)
        return timestamp_bounds(lo_us, hi_us, bool(t.tz))
    if pa.types.is_date(t):
        mm = pc.min_max(col)
        return mm["min"].as_py().isoformat(), mm["max"].as_py().isoformat()
    if pa.types.is_integer(t):
        mm = pc.min_max(col)
        return mm["min"].as_py(), mm["max"].as_py()
    if pa.types.is_floating(t):
        mm = pc.min_max(col)  # NaNs are skipped by min_max
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
            return None
        if pc.any(pc.is_nan(col)).as_py():
            return None
        return lo, hi
    if pa.types.is_decimal(t):
        if t.precision > 15:
            return None
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        return float(lo), float(hi)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        return lo[:STRING_STATS_PREFIX], (hi if len(hi) <= STRING_STATS_PREFIX else None)
    return None


def nest_struct(name: str, child: tuple[dict, dict, dict], out: tuple[dict, dict, dict]) -> None:
    """Put a struct column's (minValues, maxValues, nullCount) under ``name`` in ``out``: the bounds only
    when some child has one, the null counts always (as the spec nests them)."""
    if child[0]:
        out[0][name] = child[0]
    if child[1]:
        out[1][name] = child[1]
    out[2][name] = child[2]


def _column_stats(col: pa.ChunkedArray, out_min: dict, out_max: dict, out_nulls: dict, name: str) -> None:
    t = col.type
    if pa.types.is_struct(t):
        mins: dict = {}
        maxs: dict = {}
        nulls: dict = {}
        flat = [pa.chunked_array([c.flatten()[i] for c in col.chunks], type=t.field(i).type)
                for i in range(t.num_fields)]
        for i in range(t.num_fields):
            _column_stats(flat[i], mins, maxs, nulls, t.field(i).name)
        nest_struct(name, (mins, maxs, nulls), (out_min, out_max, out_nulls))
        return
    out_nulls[name] = col.null_count
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        return
    mm = _minmax(col)
    if mm is None:
        return
    lo, hi = mm
    if lo is not None:
        out_min[name] = lo
    if hi is not None:
        out_max[name] = hi


def compute_stats(table: pa.Table, *, exclude: Sequence[str] = (), num_indexed_cols: int = 32) -> str:
    """The ``stats`` JSON for a data file holding ``table`` (partition columns go in ``exclude``)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    cols = [n for n in table.column_names if n not in set(exclude)]
    for name in cols[:num_indexed_cols] if num_indexed_cols >= 0 else cols:
        _column_stats(table.column(name), mins, maxs, nulls, name)
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      separators=(",", ":"), ensure_ascii=False)


def serialize_partition_value(value: Any) -> Optional[str]:
    """A Python value as a Delta ``partitionValues`` string (None stays None).

    Raises:
        SchemaError: a binary value that is not UTF-8 text (it could not be read back).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # TIMESTAMP: ISO 8601 in UTC, unambiguous for every reader
            return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")  # TIMESTAMP_NTZ: no time zone
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):  # readers take the UTF-8 bytes of the text
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError(f"binary partition value {value!r} is not UTF-8 text, which Delta partition values "
                              "must be; partition by a column holding text") from None
    return str(value)


_INTS = ("long", "integer", "short", "byte")


def parse_partition_value(text: Optional[str], dtype: object) -> Any:
    """A ``partitionValues`` string as the Python value of Delta type ``dtype`` (the spec's serialization).

    Null, ``""`` and ``__HIVE_DEFAULT_PARTITION__`` are None. A TIMESTAMP may have no zone
    (``2021-09-08 11:11:11[.ffffff]``, as Delta on Spark and delta-rs write it: UTC) or be ISO 8601 with
    a zone (``2021-09-08T11:11:11.000000Z``); it becomes an aware datetime in UTC. A TIMESTAMP_NTZ is a
    naive datetime; a DATE a date; a DECIMAL a Decimal; a BINARY the UTF-8 bytes of the text.

    Raises:
        DeltaLogError: the text is not a value of that type.
    """
    if text is None or text == "" or text == HIVE_NULL:
        return None
    try:
        if dtype == "string":
            return text
        if dtype in _INTS:
            return int(text)
        if dtype in ("double", "float"):
            return float(text)
        if dtype == "boolean":
            return {"true": True, "false": False}[text.lower()]
        if dtype == "date":
            return dt.date.fromisoformat(text)
        if dtype == "timestamp":
            t = dt.datetime.fromisoformat(text)
            return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t.astimezone(dt.timezone.utc)
        if dtype == "timestamp_ntz":
            t = dt.datetime.fromisoformat(text)
            if t.tzinfo is not None:
                raise ValueError("a TIMESTAMP_NTZ has no time zone")
            return t
        if isinstance(dtype, str) and dtype.startswith("decimal"):
            value = decimal.Decimal(text)
            if not value.is_finite():
                raise ValueError("not a finite number")
            return value
        if dtype == "binary":
            return text.encode("utf-8")
    except (ValueError, KeyError, decimal.InvalidOperation, OverflowError) as e:
        raise DeltaLogError(f"partition value {text!r} is not a valid {dtype} ({e})") from None
    raise DeltaLogError(f"partition values of type {dtype} are not supported")


def spark_partition_text(text: Optional[str], dtype: object) -> Optional[str]:
    """A ``partitionValues`` string as text that Spark casts to ``dtype`` whatever its session time zone:
    a TIMESTAMP gets an explicit ``+00:00`` (a zone-less one means UTC), other types are checked and kept.

    Raises:
        DeltaLogError: the text is not a value of that type.
    """
    value = parse_partition_value(text, dtype)
    if value is None:
        return None
    if dtype in ("timestamp", "timestamp_ntz"):
        return value.isoformat(sep=" ")
    return text


def partition_path(partition_columns: Sequence[str], values: Mapping[str, Optional[str]]) -> str:
    """The Hive-style folder for a partition, escaped as Spark does (``p=a b/q=c%3Ad/r=__HIVE_DEFAULT_PARTITION__``).

    Only Hive's special characters are escaped (see :mod:`lv_core.delta.paths`); a null or empty value
    is ``__HIVE_DEFAULT_PARTITION__``. Returns ``""`` for an unpartitioned table; otherwise ends
    without a slash.
    """
    return partition_folder(partition_columns, values)
