"""Writing Parquet data files for a table with pyarrow and describing them as ``add`` actions.

This does not commit: the caller puts the returned :class:`AddFile` actions in a commit. Files are
named ``[<partition folders>/]part-<uuid>.parquet`` and written with a plain PUT (unique names).
"""

from __future__ import annotations

import io
import uuid
from typing import Callable, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lv_core.delta.actions import AddFile, now_ms
from lv_core.delta.colmap import column_mapping
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.stats import compute_stats, partition_path, serialize_partition_value
from lv_core.errors import SchemaError
from lv_core.storage.base import CREATE, ObjectStore

__all__ = ["conform", "partition_value_text", "write_data_files"]


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and cast ``data`` to the table schema; refuse missing/extra columns and nulls in NOT NULL columns.

    Raises:
        SchemaError: naming the offending column.
    """
    have = {n.lower(): n for n in data.column_names}
    extra = set(have) - {f.name.lower() for f in schema}
    if extra:
        raise SchemaError(f"columns not in the table: {', '.join(sorted(have[e] for e in extra))}")
    cols = []
    for f in schema:
        src = have.get(f.name.lower())
        if src is None:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} is NOT NULL but missing from the data")
            cols.append(pa.nulls(data.num_rows, f.type))
            continue
        col = data.column(src)
        if not f.nullable and col.null_count:
            raise SchemaError(f"column {f.name!r} is NOT NULL but the data has {col.null_count} null(s)")
        try:
            cols.append(col.cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaError(f"column {f.name!r}: cannot convert {col.type} to {f.type}: {e}") from e
    return pa.Table.from_arrays(cols, schema=schema)


def partition_value_text(value: object) -> Optional[str]:
    """A partition value as written in ``partitionValues``: an empty string is null (Delta spec)."""
    text = serialize_partition_value(value)
    return None if text == "" else text


def write_data_files(store: ObjectStore, table: str, snapshot: Snapshot, data: pa.Table, *,
                     max_rows_per_file: Optional[int] = None,
                     new_path: Optional[Callable[[Mapping[str, Optional[str]]], str]] = None) -> list[AddFile]:
    """Write ``data`` as Parquet files of ``table`` (one or more per partition); return their ``add``s.

    Each ``add`` has the exact file size, the partition values and ``stats`` (numRecords,
    minValues, maxValues, nullCount). Partition columns are not stored in the files.
    ``new_path(partition_values)`` names each file (relative to the table); files are written
    put-if-absent, so a name is never reused. An empty partition value is written as null (the Delta
    spec reads ``""`` as null; Spark and delta-rs read such rows back as null). On a column-mapped table
    the files, ``partitionValues`` and ``stats`` use the physical column names (and field ids in id mode).
    """
    data = conform(data, snapshot.schema.to_arrow())
    cm = column_mapping(snapshot)  # column mapping: files, partition values and stats use physical names
    data = cm.to_physical(data)
    parts = list(cm.physical_partition_columns)
    groups: list[tuple[dict[str, Optional[str]], pa.Table]] = []
    if parts and data.num_rows:
        keys = data.select(parts).group_by(parts).aggregate([]).to_pylist()
        for key in keys:
            mask = None
            for col, val in key.items():
                m = pc.is_null(data.column(col)) if val is None else pc.equal(data.column(col), val)
                mask = m if mask is None else pc.and_(mask, m)
            values = {c: partition_value_text(key[c]) for c in parts}
            groups.append((values, data.filter(mask).drop_columns(parts)))
    elif data.num_rows:
        groups.append(({}, data))
    out: list[AddFile] = []
    for values, rows in groups:
        step = max_rows_per_file or rows.num_rows
        for start in range(0, rows.num_rows, step):
            chunk = rows.slice(start, step)
            buf = io.BytesIO()
            pq.write_table(chunk, buf, compression="snappy")
            blob = buf.getvalue()
            if new_path is not None:
                rel = new_path(values)
            else:
                folder = partition_path(parts, values)
                rel = (folder + "/" if folder else "") + f"part-{uuid.uuid4()}.snappy.parquet"
            store.put(f"{table}/{rel}", blob, mode=CREATE)
            out.append(AddFile(rel, values, len(blob), now_ms(), True, compute_stats(chunk)))
    return out
