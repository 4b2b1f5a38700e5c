"""Data files through the client as Arrow: read a table's data files (writing: lv_core.delta.writer).

This is the engine's client path (the S3 path when the Spark server cannot reach the bucket) and what
the file-level protocol tests use. Only the files asked for are read.

Each file is fitted to the table schema as Delta readers do: partition columns come from the
``partitionValues`` strings (see :func:`lv_core.delta.stats.parse_partition_value`), columns (and
struct fields) the file lacks, e.g. added to the schema after it was written, read as null, and
INT96 timestamps are read as microseconds (so year 9999 fits).
Rows a file's deletion vector deletes (:func:`lv_core.delta.dv.deleted_rows`) are dropped.
"""

from __future__ import annotations

import io
from typing import Iterable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lv_core.delta.actions import AddFile
from lv_core.delta.colmap import ColumnMapping
from lv_core.delta.dv import deleted_rows
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.stats import parse_partition_value
from lv_core.errors import DeltaLogError, SchemaError
from lv_core.storage.base import ObjectStore


def _by_name(names: Sequence[str], name: str) -> Optional[int]:
    """Index of ``name`` in ``names``: exact match, else case-insensitive (Delta names are), else None."""
    if name in names:
        return list(names).index(name)
    lower = [n.lower() for n in names]
    return lower.index(name.lower()) if name.lower() in lower else None


def _fit(arr: pa.Array, target: pa.DataType, where: str) -> pa.Array:
    """``arr`` as ``target``: struct fields matched by name (missing ones null), other types cast."""
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
        children = arr.flatten()
        out = []
        for f in target:
            i = _by_name(names, f.name)
            out.append(pa.nulls(len(arr), f.type) if i is None else _fit(children[i], f.type, f"{where}.{f.name}"))
        return pa.StructArray.from_arrays(out, fields=list(target), mask=arr.is_null() if arr.null_count else None)
    try:
        return arr.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"column {where}: the file's {arr.type} does not read as {target}: {e}") from None


def read_data_files(store: ObjectStore, table: str, files: Iterable[AddFile], schema: DeltaSchema,
                    partition_columns: Sequence[str] = (), mapping: Optional[ColumnMapping] = None) -> pa.Table:
    """Read the given data files into one Arrow table with the table's schema (partition columns filled).

    ``mapping`` (:func:`lv_core.delta.colmap.column_mapping`): the files of a column-mapped table hold
    physical names, which are read and shown under the logical ones."""
    cm = mapping if mapping is not None else ColumnMapping("none", schema, tuple(partition_columns))
    physical = cm.physical
    target = cm.physical_arrow
    parts_lower = {c.lower() for c in cm.physical_partition_columns}
    parts: list[pa.Table] = []
    for add in files:
        raw = store.get(f"{table}/{add.path}").data
        t = pq.read_table(io.BytesIO(raw), coerce_int96_timestamp_unit="us")
        gone = deleted_rows(store, table, add)
        if gone is not None and len(gone):
            keep = np.ones(t.num_rows, dtype=bool)
            keep[gone[gone < t.num_rows].astype(np.int64)] = False
            t = t.filter(pa.array(keep))
        cols = []
        for field, delta_field in zip(target, physical, strict=True):
            if field.name.lower() in parts_lower:
                text = add.partition_values.get(field.name)
                try:
                    value = parse_partition_value(text, delta_field.type)
                    cols.append(pa.repeat(pa.scalar(value, field.type), t.num_rows))
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                    raise DeltaLogError(f"table {table!r}, file {add.path!r}: partition value {text!r} of column "
                                        f"{field.name!r} is not a valid {delta_field.type}: {e}") from None
                continue
            i = _by_name(t.column_names, field.name)
            if i is None:  # written before the column was added to the table
                cols.append(pa.nulls(t.num_rows, field.type))
            else:
                cols.append(_fit(t.column(i).combine_chunks(), field.type, repr(field.name)))
        parts.append(cm.to_logical(pa.Table.from_arrays(cols, schema=target)))
    if not parts:
        return cm.logical_arrow.empty_table()
    return pa.concat_tables(parts)
