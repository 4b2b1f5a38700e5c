"""The ``lv_files`` Spark Python data source: Parquet data files streamed between an object store
and the Spark server's Python workers, so that table data never passes through the notebook kernel.

Used by the ``stream`` data path (:mod:`lv_core.engine.stream_io`) when the Spark server cannot reach
the store itself (the embedded server has no S3 connector). This module runs in the Spark server's
Python workers: it imports pyarrow, pyspark, and (in the writer) :mod:`lv_core.delta.stats` and
:func:`lv_core.engine.spark_stats.unmask`, so the workers need ``lv_core`` importable, as the
embedded server's workers have (on a cluster: install it on the workers, or use s3a).

Reading (``spark.read.format("lv_files").schema(...).option("files", ...)``): files are packed into
input partitions as Spark packs its own file scans (:func:`pack`: about ``total bytes / parallelism``
per partition, at most ``max_partition_bytes``, each file counting ``open_cost`` more; at most
``max_partitions``, default 256); each file is read
with ``pyarrow`` from the store row group by row group (``iter_batches``), its columns fitted to
the requested schema by name (missing ones null, struct fields by name), the partition values added
as strings, and, when asked, the file's key and each row's index (for deletion vectors). Writing
(``df.write.format("lv_files")``): each task streams its rows, sorted by the partition columns, into
one Parquet file per partition value under the staging prefix, computing the file's Delta stats
batch by batch; the job's commit writes a manifest (file, partition values, exact size, stats) that
the client reads; an aborted job deletes what its tasks wrote.

Store options (credentials are passed as options named ``access.key``, ``secret.key``,
``session.token``: Spark redacts such names in plans and logs): ``endpoint`` (http(s) URL),
``region``, ``bucket``.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

__all__ = ["NAME", "LvFiles", "merge_stats", "pack", "schema_option"]

NAME = "lv_files"
BATCH_ROWS = 65536
#: files up to this size are read with one request (larger ones: ranged reads of the columns asked for)
WHOLE_FILE_BYTES = 64 << 20
#: the stream writer's row groups: this many rows, or this many bytes in memory, whichever comes first
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 << 20
#: Spark's defaults for file scans (``spark.sql.files.maxPartitionBytes``, ``openCostInBytes``)
MAX_PARTITION_BYTES = 128 << 20
OPEN_COST = 4 << 20


def pack(sizes: list[int], parallelism: int, max_bytes: int = MAX_PARTITION_BYTES, open_cost: int = OPEN_COST,
         max_partitions: int = 256) -> list[list[int]]:
    """Group file indexes into read partitions (pure), sized as Spark sizes its file scan splits: a
    partition holds about ``min(max_bytes, max(open_cost, total / parallelism))`` bytes, where each
    file counts ``open_cost`` on top of its size (a task per small file costs more than its bytes);
    largest files first, each to the lightest group; a group over that size holds one file. At least
    one group; never more than files."""
    if not sizes:
        return [[]]
    cost = [max(0, s) + open_cost for s in sizes]
    total = sum(cost)
    split = min(max_bytes, max(open_cost, total // max(1, parallelism)))
    order = sorted(range(len(sizes)), key=lambda j: -cost[j])
    n = max(1, min(len(sizes), max_partitions, -(-total // split)))
    while True:
        groups: list[list[int]] = [[] for _ in range(n)]
        load = [0] * n
        for i in order:
            g = load.index(min(load))
            groups[g].append(i)
            load[g] += cost[i]
        over = sum(1 for g, b in zip(groups, load, strict=True) if b > split and len(g) > 1)
        if not over or n >= min(len(sizes), max_partitions):
            break
        n = min(len(sizes), max_partitions, n + over)  # files are not split: more groups until each fits
    return groups


def schema_option(schema: pa.Schema) -> str:
    """An Arrow schema as an option string (base64 of its IPC serialisation, field metadata included)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _schema_of(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def filesystem(options: Mapping[str, str]) -> Any:
    """The pyarrow S3 file system the options describe."""
    import pyarrow.fs as pafs

    kw: dict[str, Any] = {"region": options.get("region") or None}
    if options.get("access.key"):
        kw.update(access_key=options["access.key"], secret_key=options.get("secret.key"),
                  session_token=options.get("session.token") or None)
    endpoint = options.get("endpoint")
    if endpoint:
        u = urlparse(endpoint)
        kw.update(endpoint_override=u.netloc, scheme=u.scheme or "https")
    return pafs.S3FileSystem(**kw)


def _fit(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` as ``target``: struct fields matched by name (case-insensitively; missing ones null)."""
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        names = [arr.type.field(i).name.lower() for i in range(arr.type.num_fields)]
        out = [pa.nulls(len(arr), f.type) if f.name.lower() not in names  # field(): no parent nulls mixed in
               else _fit(arr.field(names.index(f.name.lower())), f.type) for f in target]
        return pa.StructArray.from_arrays(out, fields=list(target), mask=arr.is_null() if arr.null_count else None)
    return arr.cast(target)


# -------------------------------------------------------------------------------------------- reading


def _repeat(value: Optional[str], n: int, dtype: pa.DataType) -> pa.Array:
    """``value`` ``n`` times as an array of ``dtype`` (built in Arrow, not from a Python list)."""
    if value is None:
        return pa.nulls(n, dtype)
    return pa.repeat(pa.scalar(value, pa.string()), n).cast(dtype)


@dataclass
class _Files(InputPartition):
    files: list[list[Any]]  # [bucket key, raw name, {partition column: text}]


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: Any) -> None:
        self.options = dict(options)
        self.schema = schema

    def partitions(self) -> list[_Files]:
        """The files packed into partitions of similar size (:func:`pack`)."""
        files = json.loads(self.options["files"])  # [key, raw, values, size]
        o = self.options
        groups = pack([int(f[3]) for f in files], int(o.get("parallelism", 8)),
                      int(o.get("max_partition_bytes", MAX_PARTITION_BYTES)), int(o.get("open_cost", OPEN_COST)),
                      int(o.get("max_partitions", 256)))
        return [_Files([files[i][:3] for i in g]) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        from pyspark.sql.pandas.types import to_arrow_schema

        try:
            target = to_arrow_schema(self.schema, timezone="UTC")
        except TypeError:  # Spark 4.0 has no timezone argument (and maps timestamps to UTC)
            target = to_arrow_schema(self.schema)
        parts = set(json.loads(self.options.get("partition_columns", "[]")))
        key_col, row_col = self.options.get("key_column"), self.options.get("row_column")
        fs = filesystem(self.options)
        bucket = self.options["bucket"]
        for key, raw, values in partition.files:
            with fs.open_input_file(f"{bucket}/{key}") as f:
                # A file up to WHOLE_FILE_BYTES is fetched with one GET: reading some columns of a file
                # in place costs a ranged GET per row group and column, which on S3 outweighs the bytes.
                src = pa.BufferReader(f.read()) if f.size() <= WHOLE_FILE_BYTES else f
                pf = pq.ParquetFile(src, coerce_int96_timestamp_unit="us")
                # only the columns asked for (Spark pushes no column pruning down to a Python data
                # source; the SQL layer asks for fewer columns instead), at least one for the row count
                wanted = {fld.name.lower() for fld in target if fld.name not in (key_col, row_col, *parts)}
                read = [n for n in pf.schema_arrow.names if n.lower() in wanted] or pf.schema_arrow.names[:1]
                start = 0
                for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=read):
                    names = [x.lower() for x in batch.schema.names]
                    n = batch.num_rows
                    cols: list[pa.Array] = []
                    for fld in target:
                        if fld.name == key_col:
                            cols.append(_repeat(raw, n, fld.type))
                        elif fld.name == row_col:
                            cols.append(pa.array(np.arange(start, start + n, dtype=np.int64)).cast(fld.type))
                        elif fld.name in parts:
                            cols.append(_repeat(values.get(fld.name), n, fld.type))
                        elif fld.name.lower() in names:
                            cols.append(_fit(batch.column(names.index(fld.name.lower())), fld.type))
                        else:
                            cols.append(pa.nulls(n, fld.type))
                    start += n
                    yield pa.RecordBatch.from_arrays(cols, schema=target)


# -------------------------------------------------------------------------------------------- writing


def merge_stats(a: Optional[dict[str, Any]], b: dict[str, Any]) -> dict[str, Any]:
    """Delta stats of two row sets in one file, from the stats of each (``a`` None: none yet).

    A min (max) is kept only if every part with non-null values had one: a part whose bound was left
    out (a long string maximum, NaN) leaves it out for the whole file, as one computation would.
    """
    if a is None:
        return b
    n_a, n_b = a["numRecords"], b["numRecords"]

    def walk(na: Any, nb: Any, la: Any, lb: Any, ha: Any, hb: Any) -> tuple[Any, Any, Any]:
        if isinstance(na, dict):
            out_n: dict[str, Any] = {}
            out_lo: dict[str, Any] = {}
            out_hi: dict[str, Any] = {}
            for k in na:
                def sub(d: Any, k: str = k) -> Any:
                    return d.get(k) if isinstance(d, dict) else None
                n, lo, hi = walk(na[k], sub(nb), sub(la), sub(lb), sub(ha), sub(hb))
                out_n[k] = n
                if lo not in (None, {}):
                    out_lo[k] = lo
                if hi not in (None, {}):
                    out_hi[k] = hi
            return out_n, out_lo, out_hi
        nb = nb or 0
        has_a, has_b = n_a - na > 0, n_b - nb > 0

        def pick(x: Any, y: Any, fn: Any) -> Any:
            if (has_a and x is None) or (has_b and y is None):
                return None  # a part with values but no bound: no bound for the file
            vals = [v for v in (x, y) if v is not None]
            return fn(vals) if vals else None

        return na + nb, pick(la, lb, min), pick(ha, hb, max)

    nulls, mins, maxs = walk(a["nullCount"], b["nullCount"], a["minValues"], b["minValues"], a["maxValues"],
                             b["maxValues"])
    return {"numRecords": n_a + n_b, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


@dataclass
class _Written(WriterCommitMessage):
    files: list[dict[str, Any]] = field(default_factory=list)


class _Writer(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        from lv_core.delta.stats import compute_stats, serialize_partition_value
        from lv_core.engine.spark_stats import unmask

        schema = _schema_of(self.options["arrow_schema"])
        parts = json.loads(self.options.get("partition_columns", "[]"))
        max_rows = int(self.options.get("max_rows") or 0)  # 0: no limit
        data_schema = pa.schema([f for f in schema if f.name not in parts])
        fs = filesystem(self.options)
        prefix = f"{self.options['bucket']}/{self.options['stage']}"
        done: list[dict[str, Any]] = []
        current: Optional[dict[str, Any]] = None

        def flush(cur: dict[str, Any]) -> None:
            if cur["pending"]:
                cur["writer"].write_table(pa.concat_tables(cur["pending"]))
                cur["pending"], cur["rows"], cur["bytes"] = [], 0, 0

        def close(cur: Optional[dict[str, Any]]) -> None:
            if cur is not None:
                flush(cur)
                cur["writer"].close()
                cur["sink"].close()
                done.append({"file": cur["file"], "values": cur["values"], "stats": json.dumps(cur["stats"]),
                             "size": fs.get_file_info(f"{prefix}/{cur['file']}").size})

        try:
            for batch in iterator:
                if not batch.num_rows:
                    continue
                by_name = {n.lower(): i for i, n in enumerate(batch.schema.names)}
                t = pa.Table.from_arrays([_fit(unmask(batch.column(by_name[f.name.lower()]), f.type), f.type)
                                          for f in schema], schema=schema)
                for values, all_rows in _split(t, parts, serialize_partition_value):
                    used = current["total"] if current is not None and current["values"] == values else 0
                    for rows in _slices(all_rows, used, max_rows):
                        full = current is not None and max_rows and current["total"] >= max_rows
                        if current is None or current["values"] != values or full:
                            close(current)
                            name = f"part-{uuid.uuid4().hex}.parquet"
                            sink = fs.open_output_stream(f"{prefix}/{name}")
                            current = {"file": name, "values": values, "sink": sink, "stats": None,
                                       "writer": pq.ParquetWriter(sink, data_schema, compression="snappy"),
                                       "pending": [], "rows": 0, "bytes": 0, "total": 0}
                        # Spark hands over small batches: row groups of ROW_GROUP_ROWS rows (or bytes) instead
                        current["pending"].append(rows)
                        current["rows"] += rows.num_rows
                        current["total"] += rows.num_rows
                        current["bytes"] += rows.nbytes
                        if current["rows"] >= ROW_GROUP_ROWS or current["bytes"] >= ROW_GROUP_BYTES:
                            flush(current)
                        current["stats"] = merge_stats(current["stats"], json.loads(compute_stats(rows)))
            close(current)
            current = None
        except BaseException:
            for f in done:
                fs.delete_file(f"{prefix}/{f['file']}")
            raise
        return _Written(done)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [f for m in messages if isinstance(m, _Written) for f in m.files]
        fs = filesystem(self.options)
        with fs.open_output_stream(f"{self.options['bucket']}/{self.options['manifest']}") as out:
            out.write(json.dumps({"files": files}).encode())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        fs = filesystem(self.options)
        for m in messages:
            for f in (m.files if isinstance(m, _Written) else ()):
                fs.delete_file(f"{self.options['bucket']}/{self.options['stage']}/{f['file']}")


def _slices(t: pa.Table, used: int, max_rows: int) -> Iterator[pa.Table]:
    """``t`` cut so that the first piece fills a file holding ``used`` rows up to ``max_rows`` and every
    later piece fills one file (``max_rows`` 0: ``t`` whole)."""
    if not max_rows:
        yield t
        return
    start = 0
    room = max_rows - used if 0 < max_rows - used else max_rows
    while start < t.num_rows:
        yield t.slice(start, room)
        start += room
        room = max_rows


def _split(t: pa.Table, parts: list[str], text: Any) -> Iterator[tuple[dict[str, Optional[str]], pa.Table]]:
    """The rows of ``t`` per partition value, in order of first appearance (partition columns dropped)."""
    if not parts:
        yield {}, t
        return
    keys = t.select(parts).group_by(parts, use_threads=False).aggregate([]).to_pylist()
    for key in keys:
        mask = None
        for c, v in key.items():
            m = pc.is_null(t.column(c)) if v is None else pc.equal(t.column(c), v)
            mask = m if mask is None else pc.and_(mask, m)
        values = {c: (None if (s := text(key[c])) == "" else s) for c in parts}
        yield values, t.filter(mask).drop_columns(parts)


class LvFiles(DataSource):
    """``lv_files``: the reader and writer above (the schema is always given by the client)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        raise ValueError("lv_files needs an explicit schema")

    def reader(self, schema: Any) -> _Reader:
        return _Reader(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> _Writer:
        return _Writer(self.options)
