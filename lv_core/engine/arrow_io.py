"""Data files through the client as Arrow: read a table's data files (writing: lv_core.delta.writer).

This is the engine's client path (the S3 path when the Spark server cannot reach the bucket) and what
the file-level protocol tests use. Only the files asked for are read.
"""

from __future__ import annotations

import io
from typing import Iterable, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lv_core.delta.actions import AddFile
from lv_core.delta.colmap import ColumnMapping
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.stats import HIVE_NULL
from lv_core.storage.base import ObjectStore


def read_data_files(store: ObjectStore, table: str, files: Iterable[AddFile], schema: DeltaSchema,
                    partition_columns: Sequence[str] = (), mapping: Optional[ColumnMapping] = None) -> pa.Table:
    """Read the given data files into one Arrow table with the table's schema (partition columns filled).

    ``mapping`` (:func:`lv_core.delta.colmap.column_mapping`): the files of a column-mapped table hold
    physical names, which are read and shown under the logical ones."""
    cm = mapping if mapping is not None else ColumnMapping("none", schema, tuple(partition_columns))
    target = cm.physical_arrow
    parts: list[pa.Table] = []
    for add in files:
        raw = store.get(f"{table}/{add.path}").data
        t = pq.read_table(io.BytesIO(raw))
        for c in cm.physical_partition_columns:
            field = target.field(c)
            v = add.partition_values.get(c)
            v = None if v in ("", HIVE_NULL) else v  # Delta: an empty value is null (as on the direct path)
            arr = pa.array([v] * t.num_rows, type=pa.string()).cast(field.type)
            t = t.append_column(c, arr)
        parts.append(cm.to_logical(t.select(target.names).cast(target)))
    if not parts:
        return cm.logical_arrow.empty_table()
    return pa.concat_tables(parts)
