"""Data files <-> Spark DataFrames: the engine's two data paths.

``direct``: Spark reads and writes the table's files itself (a local folder with the embedded server,
or a cluster that reaches the bucket: ``s3://`` is handed to Spark as ``s3a://`` by default). Each write
goes to a fresh folder inside the table folder (``<table>/part-<txn>-<step>-<attempt>-s<id>/``, Hive-style
partition folders below it) and its files stay there: no copy, no rename. Their stats come from the
files' Parquet footers and their partition values from the folders Spark wrote
(:mod:`lv_core.engine.footer_stats`; when a footer cannot give exact stats, one Spark aggregate over
the files grouped by ``_metadata.file_path``). Change data files are written to a staging folder
(``<table>/_lv_staging/``) and then get their names under ``_change_data/``. Nothing is visible to
Delta readers until the commit names the files; a write that fails deletes its folder, and
``lv recover`` finds the folders of crashed transactions by their names.

``arrow``: data moves through this client as Arrow: pyarrow reads the files from the object store
and Spark receives them with ``createDataFrame``; Spark results come back with ``toArrow`` and pyarrow
writes them (:func:`lv_core.delta.writer.write_data_files`). Used when Spark cannot reach the store
(the local server has no S3 connector).

The choice is made once per lakehouse (``auto``: direct for a local folder with the embedded server,
otherwise a one-file probe read by Spark decides), logged once and kept in :attr:`SparkEngine.data_path`
and :attr:`SparkEngine.data_path_reason`. Both paths produce the same files' content and stats.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import uuid
from collections import deque
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Mapping, Optional, Sequence
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa

from lv_core.delta.actions import AddCDCFile, AddFile, now_ms
from lv_core.delta.colmap import column_mapping
from lv_core.delta.dv import deleted_rows, dv_of
from lv_core.delta.features import (
    check_readable,
    has_variant,
    identity_columns,
    identity_refusal,
    variant_refusal,
)
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.stats import spark_partition_text
from lv_core.delta.writer import conform, write_data_files
from lv_core.engine import cdf, progress
from lv_core.engine.arrow_io import read_data_files
from lv_core.engine.colmap import logical_frame, physical_frame
from lv_core.engine.spark_checks import check_rows, enforce
from lv_core.engine.spark_schema import (
    col,
    conform_frame,
    needs_fix,
    nullable_type,
    spark_errors,
    spark_schema,
    with_exact_schema,
)
from lv_core.engine.spark_stats import stats_aggregates, unmask
from lv_core.engine.stream_io import StreamFiles
from lv_core.engine.stream_io import supported as stream_supported
from lv_core.engine.write_folder import STAGING, Fact, drop_debris, drop_folder, footer_facts, local_root, staged_files
from lv_core.errors import ConfigError, EngineError, LvError, TableError
from lv_core.storage.base import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from lv_core.txn.context import OpContext

__all__ = ["DATA_PATHS", "FILE_COL", "STAGING", "SparkEngine"]

log = logging.getLogger("lv_core.engine")

DATA_PATHS = ("auto", "direct", "stream", "arrow")
#: a rewrite's files get at most as many rows as the largest file rewritten, but at least this many
REWRITE_MIN_ROWS = 1 << 20
#: Name of the column a scan can add: which data file (Delta path) each row came from.
FILE_COL = "__lv_file"
# Internal columns of a direct scan: the file (as :meth:`SparkEngine._raw`), a row's index in its file,
# and the partition values (strings, cast to the column type after the join).
_KEY = "__lv_scan_file"
_ROW = "__lv_scan_row"
_PART = "__lv_scan_part_"
#: From this many rows a scan that needs each row's file joins on the URIs Spark reports (learnt with
#: one extra call) instead of decoding every row's ``_metadata.file_path``.
_URI_ROWS = 1_000_000


def _rows(files: Sequence[AddFile]) -> int:
    return sum(f.num_records if f.num_records is not None else _URI_ROWS for f in files)


class SparkEngine:
    """The data plane of one lakehouse: a Spark session, the store, and the chosen data path.

    Args:
        spark: the Spark Connect session.
        store: the warehouse's object store.
        data_path: ``"auto"``, ``"direct"`` (Spark reaches the files) or ``"arrow"`` (through this client).
        s3_scheme: the scheme Spark uses for ``s3://`` URLs on the direct path (``"s3a"``, or ``"s3"`` on EMR).
        embedded: the session is this process's embedded local server (it sees local folders).
    """

    def __init__(self, spark: "SparkSession | ConnectSession", store: ObjectStore, *, data_path: str = "auto",
                 s3_scheme: str = "s3a", embedded: bool = False) -> None:
        if data_path not in DATA_PATHS:
            raise ConfigError(f"data_path must be one of {', '.join(DATA_PATHS)}, not {data_path!r}")
        self.spark = spark
        self.store = store
        self.requested = data_path
        self.s3_scheme = s3_scheme
        self.embedded = embedded
        self.data_path: Optional[str] = None  #: "direct" or "arrow", decided on first data access
        self.data_path_reason = ""
        #: (table, data files) of every scan handed to Spark or pyarrow, newest last (for tests/inspection)
        self.scans: deque[tuple[str, tuple[str, ...]]] = deque(maxlen=1000)
        self._lock = threading.Lock()
        self._stream: Optional[StreamFiles] = None
        #: raw path (:meth:`_raw`) -> the URI Spark reports as ``_metadata.file_path`` (files never change)
        self._uris: dict[str, str] = {}
        self._uri_form: Optional[bool] = None  #: whether those URIs are known to match (None: not checked)
        #: SELECTs bind committed table versions through session views (:mod:`lv_core.engine.spark_views`);
        #: False binds every table inline, as before issue 38 (the TPC-DS benchmark compares both)
        self.pinned_views = True
        with spark_errors("configuring the Spark session"):
            # Standard Parquet timestamps (not INT96): readable by every Delta reader, with stats.
            spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

    def __repr__(self) -> str:
        return f"SparkEngine({self.store.url()!r}, data_path={self.data_path or self.requested!r})"

    # -- locations ---------------------------------------------------------------------------
    def url(self, key: str) -> str:
        """The URL Spark uses for a store key (raw characters, not percent-encoded)."""
        if self.store.scheme == "file":
            return "file:" + str(local_root(self.store) / key)
        u = self.store.url(key)
        scheme, rest = u.split("://", 1)
        return f"{self.s3_scheme if scheme == 's3' else scheme}://{rest}"

    def _decoded(self, url: str) -> str:
        """The comparable path of a URL Spark reports (``_metadata.file_path`` is percent-encoded)."""
        p = urlparse(url)
        return (p.netloc + unquote(p.path)) if p.scheme not in ("file", "") else unquote(p.path)

    def _raw(self, key: str) -> str:
        u = self.url(key)
        if self.store.scheme == "file":
            return u[len("file:"):]
        return u.split("://", 1)[1]

    # -- data path ---------------------------------------------------------------------------
    def ensure_path(self, table: str) -> str:
        """Decide the data path (once): configuration, else local+embedded, else a probe read by Spark."""
        if self.data_path is not None:
            return self.data_path
        with self._lock:
            if self.data_path is not None:
                return self.data_path
            if self.requested != "auto":
                path, reason = self.requested, "set by configuration"
            elif self.store.scheme == "file" and self.embedded:
                path, reason = "direct", "local folder read and written by the embedded Spark server"
            else:
                probe = self.url(f"{table}/_delta_log")
                try:
                    with spark_errors("probe"):
                        self.spark.read.text(probe).limit(1).collect()
                    path, reason = "direct", f"the Spark server can read {probe}"
                except LvError as e:
                    path, reason = self._without_direct(f"the Spark server cannot read {probe} ({str(e)[:200]})")
            self.data_path, self.data_path_reason = path, reason
            log.info("LakeVilla data path for %s: %s (%s)", self.store.url(), path, reason)
            return path

    def _without_direct(self, why: str) -> tuple[str, str]:
        """``stream`` when the server's Python workers can run the ``lv_files`` data source, else ``arrow``."""
        if self.store.scheme == "s3" and stream_supported(self.spark):
            try:
                with spark_errors("probing the lv_files data source"):
                    self._streams().probe()
                return "stream", (f"{why}; its Python workers stream the files from and to the store "
                                  "(lv_files data source)")
            except LvError as e:
                why = f"{why}; its Python workers cannot run the lv_files data source ({str(e)[:200]})"
        return "arrow", f"{why}; data moves through this client as Arrow"

    # -- reads -------------------------------------------------------------------------------
    def scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], *, file_col: bool = False,
             cache: Optional[dict[str, pa.Table]] = None, columns: Optional[Collection[str]] = None) -> "DataFrame":
        """The rows of ``files`` as a DataFrame with the table's columns (partition columns filled from
        ``partitionValues``), all nullable, without the rows the files' deletion vectors delete;
        ``file_col`` adds :data:`FILE_COL` holding each row's file (its Delta path; map it with
        :meth:`file_of`). ``cache`` (arrow path) keeps the Arrow data of files already fetched.
        ``columns`` (lower-cased names; None: all): the only columns the caller may use; the ``stream``
        path then leaves the others out (its reader gets no column pruning from Spark)."""
        check_readable(snapshot.protocol, snapshot.metadata, table=table)
        snapshot = self._pruned(table, snapshot, columns)
        for f in files:
            if "://" in f.path or f.path.startswith("/"):
                raise TableError(f"table {table!r}: data file {f.path!r} uses an absolute path, which this "
                                 "engine does not read")
            dv_of(f)  # a malformed descriptor fails here, before any data is read
        self.scans.append((table, tuple(f.path for f in files)))
        extra = [(FILE_COL, "string")] if file_col else []
        path = self.ensure_path(table)
        if not files:
            return self.spark.createDataFrame([], spark_schema(snapshot.schema, extra=extra))
        if path != "direct" and has_variant(snapshot.schema):
            raise variant_refusal(table)
        if path == "arrow":
            return self._arrow_scan(table, snapshot, files, file_col, cache)
        return self._direct_scan(table, snapshot, files, file_col)

    def _direct_scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], file_col: bool) -> "DataFrame":
        """ONE Spark read over all ``files``; per-file facts (partition values, Delta path) come from a
        small per-file frame joined on the file, deleted rows from a per-deleted-row frame anti-joined on
        (file, ``_metadata.row_index``). Both are built here from the log (metadata, not table data)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType, StringType, StructField, StructType

        cm = column_mapping(snapshot)  # read physical names (identity without column mapping), see the end
        parts = list(cm.physical_partition_columns)
        data_schema = spark_schema(cm.physical, drop=parts)
        full = spark_schema(cm.physical)
        raws = [self._raw(f"{table}/{f.path}") for f in files]
        gone: list[tuple[str, np.ndarray]] = []
        for raw, f in zip(raws, files, strict=True):
            rows = deleted_rows(self.store, table, f)
            if rows is not None and len(rows):
                gone.append((raw, rows))
        need_files = bool(parts) or file_col
        with spark_errors(f"reading {table!r}"):
            if self.data_path == "stream":  # the file key and row index come from the reader, when needed
                schema = data_schema.add(_KEY, "string") if need_files or gone else data_schema
                df = self._streams().scan([f"{table}/{f.path}" for f in files], raws, [{} for _ in files],
                                          [f.size for f in files], schema.add(_ROW, "long") if gone else schema,
                                          (), key_column=_KEY if need_files or gone else None,
                                          row_column=_ROW if gone else None)
            else:
                # recursiveFileLookup: no partition discovery from folder names (the log has the values)
                df = (self.spark.read.schema(data_schema).option("recursiveFileLookup", "true")
                      .parquet(*[self.url(f"{table}/{f.path}") for f in files]))
                uris = self._file_uris(df, raws) if need_files and not gone and _rows(files) >= _URI_ROWS else None
                if uris is not None:  # join on the URI as Spark reports it: no per-row decoding
                    df = df.withColumn(_KEY, F.col("_metadata.file_path"))
                    raws = uris
                elif need_files or gone:
                    df = df.withColumn(_KEY, self._key_expr())
                if gone:
                    df = df.withColumn(_ROW, F.col("_metadata.row_index"))
            if gone:
                idx = pa.table({_KEY: pa.array([raw for raw, rows in gone for _ in range(len(rows))], pa.string()),
                                _ROW: pa.array(np.concatenate([rows for _r, rows in gone]).astype(np.int64))})
                deleted = self.spark.createDataFrame(idx, schema=StructType([StructField(_KEY, StringType()),
                                                                             StructField(_ROW, LongType())]))
                df = df.join(F.broadcast(deleted), [_KEY, _ROW], "left_anti")
            if need_files:
                names = [_KEY, FILE_COL] + [f"{_PART}{i}" for i in range(len(parts))]
                values = [[spark_partition_text(f.partition_values.get(p), cm.physical.field(p).type)
                           for f in files] for p in parts]
                facts = pa.table([pa.array(raws, pa.string()), pa.array([f.path for f in files], pa.string())]
                                 + [pa.array(v, pa.string()) for v in values], names=names)
                per_file = self.spark.createDataFrame(
                    facts, schema=StructType([StructField(n, StringType()) for n in names]))
                df = df.join(F.broadcast(per_file), _KEY, "inner")
            cols = []
            for field in full.fields:
                if field.name in parts:
                    cols.append(F.col(f"{_PART}{parts.index(field.name)}").cast(field.dataType).alias(field.name))
                else:
                    cols.append(col(field.name))
            if file_col:
                cols.append(F.col(FILE_COL))
            return logical_frame(df.select(*cols), cm, [FILE_COL] if file_col else [])

    def _file_uris(self, df: "DataFrame", raws: Sequence[str]) -> Optional[list[str]]:
        """The ``_metadata.file_path`` URIs of ``raws`` (files of ``df``'s read), learnt with one
        ``inputFiles`` call for files not seen before; None if they cannot be known for sure.

        ``inputFiles`` writes ``file:///x`` where ``_metadata.file_path`` says ``file:/x``; once per
        engine one row's ``_metadata.file_path`` confirms the form, else this engine never joins on URIs
        (a wrong key would drop rows)."""
        from pyspark.sql import functions as F

        if self._uri_form is False:
            return None
        if any(r not in self._uris for r in raws):
            if len(self._uris) > 200_000:
                self._uris.clear()
            for uri in df.inputFiles():
                if uri.startswith("file:///"):
                    uri = "file:/" + uri[len("file:///"):]
                self._uris.setdefault(self._decoded(uri), uri)
        got = [self._uris.get(r) for r in raws]
        if any(u is None for u in got) or len(set(got)) != len(got):
            return None
        if self._uri_form is None:
            seen = df.select(F.col("_metadata.file_path")).limit(1).collect()
            if not seen:
                return None
            self._uri_form = seen[0][0] in self._uris.values()
            if not self._uri_form:
                log.info("Spark names files unlike inputFiles (%s): scans decode each row's file path", seen[0][0])
                return None
        return [u for u in got if u is not None]

    def _key_expr(self) -> "Column":
        """Spark's ``_metadata.file_path`` (a percent-encoded URI) as :meth:`_raw` writes the file: the
        path decoded (``+`` is a literal plus in a URI path) without its scheme."""
        from pyspark.sql import functions as F

        decoded = F.url_decode(F.regexp_replace(F.col("_metadata.file_path"), "\\+", "%2B"))
        if self.store.scheme == "file":
            return F.regexp_replace(decoded, "^file:(//)?", "")
        return F.regexp_replace(decoded, "^[A-Za-z][A-Za-z0-9+.-]*://", "")

    def _arrow_scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], file_col: bool,
                    cache: Optional[dict[str, pa.Table]]) -> "DataFrame":
        parts: list[pa.Table] = []
        for f in files:
            t = cache.get(f.path) if cache is not None else None
            if t is None:
                t = read_data_files(self.store, table, [f], snapshot.schema, snapshot.partition_columns,
                                    column_mapping(snapshot))
                if cache is not None:
                    cache[f.path] = t
            if file_col:
                t = t.append_column(FILE_COL, pa.array([f.path] * t.num_rows, pa.string()))
            parts.append(t)
        data = pa.concat_tables(parts)
        schema = spark_schema(snapshot.schema, extra=[(FILE_COL, "string")] if file_col else [])
        with spark_errors(f"sending {table!r} to Spark"):
            return self.spark.createDataFrame(data, schema=schema)

    def file_of(self, table: str, files: Iterable[AddFile]) -> Callable[[str], Optional[str]]:
        """Map a :data:`FILE_COL` value back to the Delta path of one of ``files`` (both data paths put
        the Delta path in :data:`FILE_COL`; None for a value naming none of ``files``)."""
        known = {f.path for f in files}
        return lambda v: v if v in known else None

    def _pruned(self, table: str, snapshot: Snapshot, columns: Optional[Collection[str]]) -> Snapshot:
        """``snapshot`` with only the fields named in ``columns`` and the partition columns (at least one
        field), on the ``stream`` path; else ``snapshot`` itself."""
        if columns is None or self.ensure_path(table) != "stream":
            return snapshot
        schema = snapshot.schema
        parts = {p.lower() for p in snapshot.partition_columns}
        keep = tuple(f for f in schema if f.name.lower() in columns or f.name.lower() in parts) or schema.fields[:1]
        if len(keep) == len(schema):
            return snapshot
        md = dataclasses.replace(snapshot.metadata, schema_string=DeltaSchema(keep).to_json_string())
        return dataclasses.replace(snapshot, metadata=md)

    def read(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], *,
             columns: Optional[Collection[str]] = None, analyse: bool = True) -> "DataFrame":
        """A user-facing DataFrame over ``files`` with the table's exact schema (types, nullability);
        ``columns`` as for :meth:`scan`. ``analyse``: have Spark analyse it now (one round trip), so
        unreachable files fail here; off when the caller's next request analyses it anyway."""
        snapshot = self._pruned(table, snapshot, columns)
        df = self.scan(table, snapshot, files)
        if self.data_path == "arrow" or not files:
            return df  # createDataFrame(schema=...) keeps the declared nullability
        with spark_errors(f"reading {table!r}"):
            df = with_exact_schema(df, snapshot.schema)
            if analyse:
                df.schema  # noqa: B018 - analysis now: unreachable files fail here, as an LvError
        return df

    # -- writes ------------------------------------------------------------------------------
    def write(self, ctx: "OpContext", table: str, df: "DataFrame", *, conformed: bool = False,
              rewrite: bool = False, like: Sequence[AddFile] = ()) -> list[AddFile]:
        """Write a DataFrame as new data files of ``table`` (named by ``ctx.new_path``); return their adds.
        ``rewrite``: the rows are existing rows of the table rewritten by UPDATE/DELETE/MERGE (their
        identity column values unchanged), not new rows. ``like``: the files these rows come from; no
        written file gets more rows than the largest of them (at least :data:`REWRITE_MIN_ROWS`), so a
        rewrite keeps the table's file granularity (Spark packs many small files into one task).

        Raises:
            SchemaError: the data does not fit the table (nothing is left behind).
            UnsupportedFeature: new rows for a table with an identity column.
        """
        progress.raise_if_cancelled(ctx.txn_id)
        snapshot = ctx.snapshot(table)
        self._identity(ctx, table, snapshot, rewrite)
        if not conformed:
            df = conform_frame(df, snapshot.schema, table)
        df = enforce(df, snapshot.metadata, table)
        ctx.rows_checked.add(table)
        if self.ensure_path(table) == "arrow":
            target = snapshot.schema.to_arrow()
            nested_not_null = any(needs_fix(f.type, True) for f in snapshot.schema)
            with spark_errors(f"computing the rows to write to {table!r}"):
                if nested_not_null:  # pyspark's toArrow refuses null structs with NOT NULL fields
                    df = df.select(*[col(f.name).cast(nullable_type(f.dataType)).alias(f.name)
                                     for f in spark_schema(snapshot.schema).fields])
                data = df.toArrow()
            if nested_not_null:
                data = pa.Table.from_arrays([unmask(c.combine_chunks(), f.type)
                                             for c, f in zip(data.columns, target, strict=False)],
                                            names=data.column_names)
            return write_data_files(self.store, table, snapshot, data,
                                    new_path=lambda values: ctx.new_path(table, values))
        most = max((f.num_records or 0 for f in like), default=0)
        return self._direct_write(ctx, table, snapshot, df, max_rows=max(most, REWRITE_MIN_ROWS) if most else None)

    def write_changes(self, ctx: "OpContext", table: str, df: "DataFrame") -> list[AddCDCFile]:
        """Write change rows (the table's columns plus ``_change_type``, see :mod:`lv_core.engine.cdf`) as
        change data files under ``_change_data/``; return their ``cdc`` actions."""
        progress.raise_if_cancelled(ctx.txn_id)
        snapshot = cdf.change_snapshot(ctx.snapshot(table))

        def new_path(values: Mapping[str, Optional[str]]) -> str:
            return f"{cdf.CHANGE_DIR}/{ctx.new_path(table, values)}"

        if self.ensure_path(table) == "arrow":
            with spark_errors(f"computing the change rows of {table!r}"):
                data = df.toArrow()
            return cdf.to_cdc(write_data_files(self.store, table, snapshot, data, new_path=new_path))
        return cdf.to_cdc(self._direct_write(ctx, table, snapshot, df, new_path))

    def write_inserted(self, ctx: "OpContext", table: str, adds: Sequence[AddFile]) -> list[AddCDCFile]:
        """Change data files holding the rows of ``adds`` (files just written) as ``insert``."""
        if not adds:
            return []
        snapshot = ctx.snapshot(table)
        df = self.scan(table, snapshot, adds)
        return self.write_changes(ctx, table, cdf.tagged(df, [col(f.name) for f in snapshot.schema], "insert"))

    def _direct_write(self, ctx: "OpContext", table: str, snapshot: Snapshot, df: "DataFrame",
                      new_path: Optional[Callable[[Mapping[str, Optional[str]]], str]] = None,
                      max_rows: Optional[int] = None) -> list[AddFile]:
        cm = column_mapping(snapshot)  # files, partition values and stats use physical names
        schema, parts = cm.physical, list(cm.physical_partition_columns)
        df = physical_frame(df, cm)
        # Data files stay where Spark writes them: one fresh folder per write, named after the transaction
        # (``lv recover`` finds a dead one's files by that name). Change data files go under _change_data/
        # (``new_path``): they are written to the staging folder and then get their names.
        folder = f"part-{ctx.txn_id}-{ctx.step:04d}-{ctx.attempt}-s{uuid.uuid4().hex[:8]}"
        in_place = new_path is None
        stage_rel = folder if in_place else f"{STAGING}/{folder}"
        stage_key = f"{table}/{stage_rel}"
        moved: list[str] = []
        staged: list[tuple[str, int]] = []
        done = False
        try:
            if self.data_path == "stream":
                with spark_errors(f"writing to {table!r}"):
                    written = self._streams().write(df, stage_key, cm.physical_arrow, parts, max_rows)
                facts = [(e["file"], dict(e["values"]), int(e["size"]), e["stats"]) for e in written]
            else:
                with spark_errors(f"writing to {table!r}"):
                    writer = df.write.mode("error").option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
                    if max_rows:
                        writer = writer.option("maxRecordsPerFile", str(max_rows))
                    if parts:
                        writer = writer.partitionBy(*parts)
                    writer.parquet(self.url(stage_key))
                staged = staged_files(self.store, stage_key)
                got = footer_facts(self.store, stage_key, staged, schema, parts)
                facts = got if got is not None else self._aggregate_facts(table, stage_key, staged, schema, parts)
            adds: list[AddFile] = []
            for rel_staged, values, size, stats in facts:
                if new_path is None:
                    rel = f"{folder}/{rel_staged}"
                else:
                    rel = new_path(values)
                    self._move(f"{stage_key}/{rel_staged}", f"{table}/{rel}")
                    moved.append(f"{table}/{rel}")
                adds.append(AddFile(rel, values, size, now_ms(), True, stats))
            if in_place and self.data_path != "stream":  # the stream writer leaves only files with rows
                drop_debris(self.store, stage_key, {rel for rel, *_x in facts}, staged)
            done = True
            return adds
        except BaseException:
            for key in moved:
                with contextlib.suppress(LvError, OSError):
                    self.store.delete(key)
            raise
        finally:
            if not (in_place and done):
                drop_folder(self.store, stage_key)

    def _streams(self) -> StreamFiles:
        """The ``lv_files`` data source of this session and store (registered on first use)."""
        if self._stream is None:
            self._stream = StreamFiles(self.spark, self.store)
        return self._stream

    def _aggregate_facts(self, table: str, stage_key: str, staged: Sequence[tuple[str, int]], schema: DeltaSchema,
                         parts: Sequence[str]) -> list[Fact]:
        """The same facts from one Spark aggregate over the staged files (reads them again)."""
        from pyspark.sql import functions as F

        stage_url = self.url(stage_key)
        aggs, decode = stats_aggregates(schema, parts)
        with spark_errors(f"computing stats of the files written to {table!r}"):
            back = (self.spark.read.schema(spark_schema(schema)).option("basePath", stage_url)
                    .parquet(*[self.url(f"{stage_key}/{k}") for k, _size in staged]))
            rows = back.groupBy(F.col("_metadata.file_path").alias("f")).agg(*aggs).collect()
        stage_raw = self._raw(stage_key) + "/"
        out = []
        for row in rows:
            src = self._decoded(row["f"])
            if not src.startswith(stage_raw):
                raise EngineError(f"Spark reported an unexpected staged file {row['f']!r}")
            values, stats = decode(row)
            out.append((src[len(stage_raw):], values, int(row["size"]), stats))
        return sorted(out)

    def _move(self, src: str, dst: str) -> None:
        """Give a staged file its final name: a store copy (a hard link in a folder, server-side on S3,
        so the bytes never pass through this client) and a delete. ``dst`` is a fresh name
        (:meth:`OpContext.new_path`), so nothing is replaced."""
        self.store.copy(src, dst)
        self.store.delete(src)

    def _identity(self, ctx: "OpContext", table: str, snapshot: Snapshot, rewrite: bool) -> None:
        identity = identity_columns(snapshot.metadata)
        if identity and not rewrite:
            raise identity_refusal(table, identity[0], "insert")
        if identity:
            ctx.identity_kept.add(table)

    # -- client data -------------------------------------------------------------------------
    def write_arrow(self, ctx: "OpContext", table: str, data: pa.Table) -> list[AddFile]:
        """Write rows already held by this client with pyarrow (both data paths): new rows."""
        self._identity(ctx, table, ctx.snapshot(table), False)
        check_rows(self.spark, data, ctx.snapshot(table).metadata, table)
        ctx.rows_checked.add(table)
        return write_data_files(self.store, table, ctx.snapshot(table), data,
                                new_path=lambda values: ctx.new_path(table, values))

    def write_arrow_inserted(self, ctx: "OpContext", table: str, data: pa.Table) -> list[AddCDCFile]:
        """Change data files holding client rows (as :meth:`write_arrow` wrote them) as ``insert``."""
        if not data.num_rows:
            return []
        snapshot = ctx.snapshot(table)
        rows = conform(data, snapshot.schema.to_arrow())
        rows = rows.append_column(cdf.CHANGE_TYPE, pa.array(["insert"] * rows.num_rows, pa.string()))
        return cdf.to_cdc(write_data_files(self.store, table, cdf.change_snapshot(snapshot), rows,
                                           new_path=lambda values: f"{cdf.CHANGE_DIR}/{ctx.new_path(table, values)}"))
