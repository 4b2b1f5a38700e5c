"""Data files through the client as Arrow: write a Parquet data file with exact Delta stats, read files.

This is the engine's client path (the S3 path when the Spark server cannot reach the bucket) and what
the file-level protocol tests use. Only the files asked for are read.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import io
import json
import time
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lv_core.delta.actions import AddFile
from lv_core.delta.schema import DeltaSchema
from lv_core.storage.base import CREATE, ObjectStore

_STATS_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_string, pa.types.is_large_string,
                pa.types.is_date, pa.types.is_timestamp, pa.types.is_decimal, pa.types.is_boolean)


def _json_value(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            return v.isoformat(timespec="milliseconds")
        return v.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return None
    return v


def compute_stats(data: pa.Table) -> dict[str, Any]:
    """Delta file stats: numRecords, minValues, maxValues, nullCount (top-level primitive columns)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, col in zip(data.column_names, data.columns):
        nulls[name] = col.null_count
        t = col.type
        if not any(f(t) for f in _STATS_TYPES) or pa.types.is_boolean(t):
            continue
        if len(col) - col.null_count == 0:
            continue
        mm = pc.min_max(col)
        lo, hi = _json_value(mm["min"].as_py()), _json_value(mm["max"].as_py())
        if isinstance(lo, float) and (lo != lo):  # NaN: leave out
            continue
        if lo is not None:
            mins[name] = lo
            maxs[name] = hi
    return {"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def partition_path(partition_values: Mapping[str, str | None]) -> str:
    """Hive-style folder for partition values (``k=v/``), empty for unpartitioned."""
    parts = []
    for k, v in partition_values.items():
        parts.append(f"{k}={'__HIVE_DEFAULT_PARTITION__' if v is None else quote(str(v), safe='')}")
    return "/".join(parts) + ("/" if parts else "")


def write_data_file(
    store: ObjectStore,
    table: str,
    rel_path: str,
    data: pa.Table,
    partition_values: Mapping[str, str | None] | None = None,
) -> AddFile:
    """Write ``data`` (without partition columns) as Parquet at ``<table>/<rel_path>``; return its add."""
    buf = io.BytesIO()
    pq.write_table(data, buf)
    body = buf.getvalue()
    store.put(f"{table}/{rel_path}", body, mode=CREATE)
    return AddFile(
        path=rel_path,
        partition_values=dict(partition_values or {}),
        size=len(body),
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps(compute_stats(data), separators=(",", ":")),
    )


def read_data_files(store: ObjectStore, table: str, files: Iterable[AddFile], schema: DeltaSchema,
                    partition_columns: Sequence[str] = ()) -> pa.Table:
    """Read the given data files into one Arrow table with the table's schema (partition columns filled)."""
    target = schema.to_arrow()
    parts: list[pa.Table] = []
    for add in files:
        raw = store.get(f"{table}/{add.path}").data
        t = pq.read_table(io.BytesIO(raw))
        for c in partition_columns:
            field = target.field(c)
            v = add.partition_values.get(c)
            arr = pa.array([v] * t.num_rows, type=pa.string()).cast(field.type)
            t = t.append_column(c, arr)
        parts.append(t.select(target.names).cast(target))
    if not parts:
        return target.empty_table()
    return pa.concat_tables(parts)
