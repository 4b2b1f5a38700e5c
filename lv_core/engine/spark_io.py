"""Data files <-> Spark DataFrames: the engine's two data paths.

``direct``: Spark reads and writes the table's files itself (a local folder with the embedded server,
or a cluster that reaches the bucket: ``s3://`` is handed to Spark as ``s3a://`` by default). Writes
go to a staging folder inside the table folder (``<table>/_lv_staging/part-<txn>-<step>-<attempt>-s<id>/``),
their stats and partition values come from one Spark aggregate over the staged files (grouped by
``_metadata.file_path``; only one row per file reaches Python), then each file is moved to its final
name (:meth:`OpContext.new_path`) and the staging folder (``_SUCCESS``/``.crc`` debris) is deleted.
Nothing is visible to Delta readers until the commit names the files.

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
import datetime as dt
import json
import logging
import os
import shutil
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence
from urllib.parse import unquote, urlparse

import pyarrow as pa

from lv_core.delta.actions import AddFile, now_ms
from lv_core.delta.features import check_readable
from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType
from lv_core.delta.snapshot import Snapshot
from lv_core.delta.stats import HIVE_NULL, STRING_STATS_PREFIX, _ts_text, serialize_partition_value
from lv_core.delta.writer import write_data_files
from lv_core.engine.arrow_io import read_data_files
from lv_core.errors import ConfigError, EngineError, LvError, SchemaError, TableError
from lv_core.storage.base import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from lv_core.txn.context import OpContext

__all__ = ["DATA_PATHS", "FILE_COL", "SparkEngine", "conform_frame", "spark_errors", "spark_schema"]

log = logging.getLogger("lv_core.engine")

DATA_PATHS = ("auto", "direct", "arrow")
#: Name of the column a scan can add: which data file (Delta path) each row came from.
FILE_COL = "__lv_file"
STAGING = "_lv_staging"
_NUM_INDEXED_COLS = 32  # as compute_stats
_NOT_NULL_TAG = "[LV_NOT_NULL]"
_INT_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_INT_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}


# --------------------------------------------------------------------------- errors
def _first_line(e: BaseException) -> str:
    text = str(e).strip().split("\n\nJVM stacktrace:")[0]
    return text.splitlines()[0] if text else type(e).__name__


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Turn Spark exceptions into LvError subclasses with one clear line (``what`` says what failed)."""
    try:
        yield
    except LvError:
        raise
    except Exception as e:  # pyspark raises many types; only its own errors are translated
        mod = type(e).__module__ or ""
        if not (mod.startswith("pyspark") or mod.startswith("py4j") or "grpc" in mod):
            raise
        msg = _first_line(e)
        full = str(e)
        if _NOT_NULL_TAG in full:
            start = full.index(_NOT_NULL_TAG) + len(_NOT_NULL_TAG)
            raise SchemaError(full[start:].split("\n")[0].strip().rstrip(".'\"") + ".") from None
        if any(k in full for k in ("UNRESOLVED_COLUMN", "DATATYPE_MISMATCH", "CAST_INVALID_INPUT",
                                   "INVALID_EXTRACT", "FIELD_NOT_FOUND", "CANNOT_PARSE")):
            raise SchemaError(f"{what}: {msg}") from None
        if "PARSE_SYNTAX_ERROR" in full or "ParseException" in type(e).__name__:
            raise ConfigError(f"{what}: not a valid Spark SQL expression: {msg}") from None
        raise EngineError(f"{what}: Spark failed: {msg}") from e


# --------------------------------------------------------------------------- schemas
def spark_schema(schema: DeltaSchema, drop: Sequence[str] = (), extra: Sequence[tuple[str, str]] = ()) -> Any:
    """The Spark ``StructType`` of a Delta schema (the schemaString *is* Spark's JSON), minus ``drop``."""
    from pyspark.sql.types import StructType as SparkStruct

    dropped = {d.lower() for d in drop}
    fields = [f for f in schema.to_json()["fields"] if f["name"].lower() not in dropped]
    fields += [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in extra]
    return SparkStruct.fromJson({"type": "struct", "fields": fields})


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _col(name: str) -> "Column":
    from pyspark.sql import functions as F

    return F.col(_q(name))


def _zero_sql(t: str) -> str:
    """A non-null SQL literal of primitive Delta type ``t`` whose type analysis keeps non-null."""
    if t.startswith("decimal"):
        scale = int(t[t.index(",") + 1:-1])
        return f"CAST({'0BD' if scale == 0 else '0.' + '0' * scale} AS {t.upper()})"
    return {"string": "''", "binary": "X''", "boolean": "false", "date": "DATE '1970-01-01'",
            "timestamp": "TIMESTAMP '1970-01-01 00:00:00'",
            "timestamp_ntz": "TIMESTAMP_NTZ '1970-01-01 00:00:00'"}.get(t, f"CAST(0 AS {_SQL_TYPES.get(t, t)})")


_SQL_TYPES = {"long": "BIGINT", "integer": "INT", "short": "SMALLINT", "byte": "TINYINT",
              "float": "FLOAT", "double": "DOUBLE"}


def _needs_fix(t: Any, nullable: bool) -> bool:
    if not nullable:
        return True
    if isinstance(t, StructType):
        return any(_needs_fix(f.type, f.nullable) for f in t.fields)
    if isinstance(t, ArrayType):
        return _needs_fix(t.element_type, t.contains_null)
    if isinstance(t, MapType):
        return _needs_fix(t.value_type, t.value_contains_null)
    return False


def _exact(e: "Column", t: Any, nullable: bool, where: str) -> "Column":
    """``e`` rebuilt so that Spark reports exactly type ``t`` with ``nullable`` (file reads make every
    column nullable); a null where none is allowed raises at run time instead of being hidden."""
    from pyspark.sql import functions as F

    if isinstance(t, StructType):
        inner = F.struct(*[_exact(e.getField(f.name), f.type, f.nullable, f"{where}.{f.name}").alias(f.name)
                           for f in t.fields])
        if nullable:
            return F.when(e.isNull(), F.lit(None)).otherwise(inner)
        return F.coalesce(F.when(e.isNull(), F.raise_error(F.lit(f"{_NOT_NULL_TAG} {where} is NOT NULL"))), inner)
    if isinstance(t, ArrayType) and _needs_fix(t.element_type, t.contains_null):
        e = F.transform(e, lambda x: _exact(x, t.element_type, t.contains_null, where + "[]"))
    elif isinstance(t, MapType) and _needs_fix(t.value_type, t.value_contains_null):
        e = F.transform_values(e, lambda k, v: _exact(v, t.value_type, t.value_contains_null, where + ".value"))
    if nullable:
        return e
    msg = F.lit(f"{_NOT_NULL_TAG} column {where} is NOT NULL but the data has a null")
    if isinstance(t, str):
        return F.coalesce(F.when(e.isNull(), F.raise_error(msg)), e, F.expr(_zero_sql(t)))
    return F.coalesce(F.when(e.isNull(), F.raise_error(msg)), e)  # complex, non-null: best effort


def with_exact_schema(df: "DataFrame", schema: DeltaSchema, keep: Sequence[str] = ()) -> "DataFrame":
    """Project ``df`` (holding the table's columns) to the declared types and nullability."""
    cols = []
    for f in schema:
        c = _col(f.name)
        cols.append((_exact(c, f.type, f.nullable, repr(f.name)) if _needs_fix(f.type, f.nullable) else c).alias(f.name))
    return df.select(*cols, *[_col(k) for k in keep])


def _fits(src: Any, dst: Any) -> bool:
    """Whether Spark type ``src`` can be stored in a column of type ``dst`` without losing data
    (equal, integer widening, integer/float/decimal to double, decimal widening, NULL)."""
    from pyspark.sql import types as T

    if isinstance(src, T.NullType):
        return True
    if isinstance(src, (T.StructType, T.ArrayType, T.MapType)) or isinstance(dst, (T.StructType, T.ArrayType, T.MapType)):
        if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
            return len(src.fields) == len(dst.fields) and all(
                a.name.lower() == b.name.lower() and _fits(a.dataType, b.dataType) for a, b in zip(src.fields, dst.fields))
        if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
            return _fits(src.elementType, dst.elementType)
        if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
            return _fits(src.keyType, dst.keyType) and _fits(src.valueType, dst.valueType)
        return False
    s, d = src.typeName(), dst.typeName()
    if isinstance(src, (T.CharType, T.VarcharType)):
        s = "string"
    if s == d and not isinstance(src, T.DecimalType):
        return True
    if s in _INT_RANK:
        if d in _INT_RANK:
            return _INT_RANK[s] <= _INT_RANK[d]
        if isinstance(dst, T.DecimalType):
            return _INT_DIGITS[s] <= dst.precision - dst.scale
        return d in ("float", "double")
    if isinstance(src, T.DecimalType):
        if isinstance(dst, T.DecimalType):
            return src.scale <= dst.scale and src.precision - src.scale <= dst.precision - dst.scale
        return d == "double"
    return s == "float" and d == "double"


def _nullable(t: Any) -> Any:
    """Spark type ``t`` with every nested field, element and value nullable."""
    from pyspark.sql import types as T

    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in t.fields])
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_nullable(t.elementType), True)
    if isinstance(t, T.MapType):
        return T.MapType(_nullable(t.keyType), _nullable(t.valueType), True)
    return t


def conform_frame(df: "DataFrame", schema: DeltaSchema, table: str) -> "DataFrame":
    """``df`` projected to the table's columns, order and types; NOT NULL checked when Spark runs it.

    Raises:
        SchemaError: a column not in the table, a missing NOT NULL column, or a type that does not
            fit (the message names the column and both types). Checked before any file is written.
    """
    from pyspark.sql import functions as F

    with spark_errors(f"reading the schema of the data for {table!r}"):
        src = df.schema
    target = spark_schema(schema)
    have = {f.name.lower(): f for f in src.fields}
    extra = sorted(set(have) - {f.name.lower() for f in target.fields})
    if extra:
        raise SchemaError(f"table {table!r} has no column(s) {', '.join(repr(have[e].name) for e in extra)}; "
                          f"its columns are {', '.join(f.name for f in target.fields)}")
    cols = []
    for f in target.fields:
        s = have.get(f.name.lower())
        if s is None:
            if not f.nullable:
                raise SchemaError(f"column {f.name!r} of {table!r} is NOT NULL but missing from the data")
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
            continue
        if not _fits(s.dataType, f.dataType):
            raise SchemaError(f"column {f.name!r} of {table!r} is {f.dataType.simpleString()}; the data has "
                              f"{s.dataType.simpleString()}, which does not fit (cast it first)")
        c = _col(s.name)
        if _nullable(s.dataType) != _nullable(f.dataType):
            c = c.cast(_nullable(f.dataType))  # Spark refuses casts that tighten nested nullability
        if not f.nullable and s.nullable:
            msg = f"{_NOT_NULL_TAG} column {f.name!r} of {table!r} is NOT NULL but the data has a null"
            c = F.when(c.isNull(), F.raise_error(F.lit(msg))).otherwise(c)
        cols.append(c.alias(f.name))
    return df.select(*cols)


# --------------------------------------------------------------------------- stats by a Spark aggregate
@dataclass(frozen=True)
class _Leaf:
    path: tuple[str, ...]
    kind: str  # "minmax" kinds: int, float, decimal, string, date, timestamp, timestamp_ntz; or "nulls"


def _leaves(fields: Iterable[Any], prefix: tuple[str, ...] = ()) -> Iterator[_Leaf]:
    for f in fields:
        path = prefix + (f.name,)
        t = f.type
        if isinstance(t, StructType):
            yield _Leaf(path, "struct")
            yield from _leaves(t.fields, path)
        elif isinstance(t, (ArrayType, MapType)) or t in ("boolean", "binary"):
            yield _Leaf(path, "nulls")
        elif t in _INT_RANK:
            yield _Leaf(path, "int")
        elif t in ("float", "double", "string", "date", "timestamp", "timestamp_ntz"):
            yield _Leaf(path, t)
        elif t.startswith("decimal"):
            p = int(t[t.index("(") + 1:t.index(",")])
            yield _Leaf(path, "decimal" if p <= 15 else "nulls")
        else:
            yield _Leaf(path, "nulls")


_NTZ_EPOCH = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"


def _micros(e: "Column", kind: str) -> "Column":
    from pyspark.sql import functions as F

    if kind == "timestamp":
        return F.unix_micros(e)
    return F.timestamp_diff("MICROSECOND", F.expr(_NTZ_EPOCH), e)


def _stats_aggregates(schema: DeltaSchema, parts: Sequence[str]) -> tuple[list["Column"], Callable[[Any], tuple[dict, str]]]:
    """Aggregate columns computing, per file, numRecords/minValues/maxValues/nullCount exactly as
    :func:`lv_core.delta.stats.compute_stats` does for Arrow data, plus size and partition values.
    Returns the columns and a decoder ``row -> (partition values, stats JSON)``."""
    from pyspark.sql import functions as F

    lower_parts = {p.lower() for p in parts}
    data = [f for f in schema if f.name.lower() not in lower_parts][:_NUM_INDEXED_COLS]
    aggs: list[Column] = [F.count(F.lit(1)).alias("n"), F.first("_metadata.file_size").alias("size")]
    plan: list[tuple[_Leaf, int]] = []
    for leaf in _leaves(data):
        e = _col(leaf.path[0])
        for name in leaf.path[1:]:
            e = e.getField(name)
        i = len(aggs)
        if leaf.kind == "struct":
            plan.append((leaf, i))
            continue
        aggs.append(F.sum(F.when(e.isNull(), 1).otherwise(0)).alias(f"a{i}"))
        k = leaf.kind
        if k in ("int", "decimal", "float", "double"):
            aggs += [F.min(e).alias(f"a{i}_lo"), F.max(e).alias(f"a{i}_hi")]
            if k in ("float", "double"):
                aggs.append(F.max(F.isnan(e).cast("int")).alias(f"a{i}_nan"))
        elif k == "string":
            aggs += [F.substring(F.min(e), 1, STRING_STATS_PREFIX).alias(f"a{i}_lo"),
                     F.when(F.length(F.max(e)) <= STRING_STATS_PREFIX, F.max(e)).alias(f"a{i}_hi")]
        elif k == "date":
            aggs += [F.min(e).cast("string").alias(f"a{i}_lo"), F.max(e).cast("string").alias(f"a{i}_hi")]
        elif k in ("timestamp", "timestamp_ntz"):
            aggs += [_micros(F.min(e), k).alias(f"a{i}_lo"), _micros(F.max(e), k).alias(f"a{i}_hi")]
        plan.append((leaf, i))
    part_fields = [schema.field(p) for p in parts]
    for j, f in enumerate(part_fields):
        e = F.first(_col(f.name))
        if f.type in ("timestamp", "timestamp_ntz"):
            e = _micros(e, str(f.type))
        aggs.append(e.alias(f"p{j}"))

    def decode(row: Any) -> tuple[dict, str]:
        r = row.asDict()
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}

        def slot(d: dict, path: tuple[str, ...]) -> dict:
            for name in path[:-1]:
                d = d.setdefault(name, {})
            return d

        for leaf, i in plan:
            name = leaf.path[-1]
            if leaf.kind == "struct":
                slot(nulls, leaf.path).setdefault(name, {})
                continue
            slot(nulls, leaf.path)[name] = int(r[f"a{i}"] or 0)
            if leaf.kind == "nulls":
                continue
            lo, hi = _stat_values(leaf.kind, r.get(f"a{i}_lo"), r.get(f"a{i}_hi"), r.get(f"a{i}_nan"))
            if lo is not None:
                slot(mins, leaf.path)[name] = lo
            if hi is not None:
                slot(maxs, leaf.path)[name] = hi
        values: dict[str, Optional[str]] = {}
        for j, f in enumerate(part_fields):
            v = r[f"p{j}"]
            if v is not None and f.type == "timestamp":
                v = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=v)
            elif v is not None and f.type == "timestamp_ntz":
                v = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v)
            values[f.name] = serialize_partition_value(v)
        stats = {"numRecords": int(r["n"]), "minValues": _prune(mins), "maxValues": _prune(maxs),
                 "nullCount": nulls}
        return values, json.dumps(stats, separators=(",", ":"), ensure_ascii=False)

    return aggs, decode


def _prune(d: dict) -> dict:
    """Drop empty nested dicts (compute_stats leaves out a struct with no bounds)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _prune(v)
            if not v:
                continue
        out[k] = v
    return out


def _stat_values(kind: str, lo: Any, hi: Any, nan: Any) -> tuple[Any, Any]:
    import math

    if kind == "string":
        return lo, hi  # the maximum is left out when longer than the prefix
    if lo is None or hi is None:
        return None, None
    if kind in ("float", "double"):
        if nan or not (math.isfinite(lo) and math.isfinite(hi)):
            return None, None
        return float(lo), float(hi)
    if kind == "decimal":
        return float(lo), float(hi)
    if kind in ("timestamp", "timestamp_ntz"):
        tz = kind == "timestamp"
        return _ts_text(lo // 1000 * 1000, tz), _ts_text(-(-hi // 1000) * 1000, tz)
    return lo, hi


# --------------------------------------------------------------------------- the engine
def _local_root(store: ObjectStore) -> Path:
    return Path(unquote(urlparse(store.url()).path))


class SparkEngine:
    """The data plane of one lakehouse: a Spark session, the store, and the chosen data path.

    Args:
        spark: the Spark Connect session.
        store: the warehouse's object store.
        data_path: ``"auto"``, ``"direct"`` (Spark reaches the files) or ``"arrow"`` (through this client).
        s3_scheme: the scheme Spark uses for ``s3://`` URLs on the direct path (``"s3a"``, or ``"s3"`` on EMR).
        embedded: the session is this process's embedded local server (it sees local folders).
    """

    def __init__(self, spark: "SparkSession", store: ObjectStore, *, data_path: str = "auto",
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
        with spark_errors("configuring the Spark session"):
            # Standard Parquet timestamps (not INT96): readable by every Delta reader, with stats.
            spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")

    def __repr__(self) -> str:
        return f"SparkEngine({self.store.url()!r}, data_path={self.data_path or self.requested!r})"

    # -- locations ---------------------------------------------------------------------------
    def url(self, key: str) -> str:
        """The URL Spark uses for a store key (raw characters, not percent-encoded)."""
        if self.store.scheme == "file":
            return "file:" + str(_local_root(self.store) / key)
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
                    path = "arrow"
                    reason = (f"the Spark server cannot read {probe} ({str(e)[:200]}); "
                              "data moves through this client as Arrow")
            self.data_path, self.data_path_reason = path, reason
            log.info("LakeVilla data path for %s: %s (%s)", self.store.url(), path, reason)
            return path

    # -- reads -------------------------------------------------------------------------------
    def scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], *, file_col: bool = False,
             cache: Optional[dict[str, pa.Table]] = None) -> "DataFrame":
        """The rows of ``files`` as a DataFrame with the table's columns (partition columns filled from
        ``partitionValues``), all nullable; ``file_col`` adds :data:`FILE_COL` holding each row's file
        (Delta path on the arrow path, Spark's ``_metadata.file_path`` on the direct path: map it with
        :meth:`file_of`). ``cache`` (arrow path) keeps the Arrow data of files already fetched."""
        check_readable(snapshot.protocol, snapshot.metadata, table=table)
        for f in files:
            if "://" in f.path or f.path.startswith("/") or f.extra.get("deletionVector"):
                raise TableError(f"table {table!r}: data file {f.path!r} uses absolute paths or deletion "
                                 "vectors, which this engine does not read")
        self.scans.append((table, tuple(f.path for f in files)))
        extra = [(FILE_COL, "string")] if file_col else []
        if not files:
            return self.spark.createDataFrame([], spark_schema(snapshot.schema, extra=extra))
        if self.ensure_path(table) == "arrow":
            return self._arrow_scan(table, snapshot, files, file_col, cache)
        return self._direct_scan(table, snapshot, files, file_col)

    def _direct_scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], file_col: bool) -> "DataFrame":
        from functools import reduce

        from pyspark.sql import functions as F

        parts = list(snapshot.partition_columns)
        data_schema = spark_schema(snapshot.schema, drop=parts)
        full = spark_schema(snapshot.schema)
        groups: dict[tuple, list[AddFile]] = {}
        for f in files:
            groups.setdefault(tuple(f.partition_values.get(p) for p in parts), []).append(f)
        frames = []
        with spark_errors(f"reading {table!r}"):
            for values, group in groups.items():
                df = self.spark.read.schema(data_schema).parquet(*[self.url(f"{table}/{f.path}") for f in group])
                cols = []
                for field in full.fields:
                    if field.name in parts:
                        v = values[parts.index(field.name)]
                        v = None if v in ("", HIVE_NULL) else v  # Delta: an empty value is null
                        cols.append(F.lit(v).cast(field.dataType).alias(field.name))
                    else:
                        cols.append(_col(field.name))
                if file_col:
                    cols.append(F.col("_metadata.file_path").alias(FILE_COL))
                frames.append(df.select(*cols))
        return reduce(lambda a, b: a.unionByName(b), frames)

    def _arrow_scan(self, table: str, snapshot: Snapshot, files: Sequence[AddFile], file_col: bool,
                    cache: Optional[dict[str, pa.Table]]) -> "DataFrame":
        parts: list[pa.Table] = []
        for f in files:
            t = cache.get(f.path) if cache is not None else None
            if t is None:
                t = read_data_files(self.store, table, [f], snapshot.schema, snapshot.partition_columns)
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
        """Map a :data:`FILE_COL` value back to the Delta path of one of ``files``."""
        if self.data_path == "arrow":
            known = {f.path for f in files}
            return lambda v: v if v in known else None
        by_raw = {self._raw(f"{table}/{f.path}"): f.path for f in files}
        return lambda v: by_raw.get(self._decoded(v))

    def read(self, table: str, snapshot: Snapshot, files: Sequence[AddFile]) -> "DataFrame":
        """A user-facing DataFrame over ``files`` with the table's exact schema (types, nullability)."""
        df = self.scan(table, snapshot, files)
        if self.data_path == "arrow" or not files:
            return df  # createDataFrame(schema=...) keeps the declared nullability
        with spark_errors(f"reading {table!r}"):
            return with_exact_schema(df, snapshot.schema)

    # -- writes ------------------------------------------------------------------------------
    def write(self, ctx: "OpContext", table: str, df: "DataFrame", *, conformed: bool = False) -> list[AddFile]:
        """Write a DataFrame as new data files of ``table`` (named by ``ctx.new_path``); return their adds.

        Raises:
            SchemaError: the data does not fit the table (nothing is left behind).
        """
        snapshot = ctx.snapshot(table)
        if not conformed:
            df = conform_frame(df, snapshot.schema, table)
        if self.ensure_path(table) == "arrow":
            with spark_errors(f"computing the rows to write to {table!r}"):
                data = df.toArrow()
            return write_data_files(self.store, table, snapshot, data,
                                    new_path=lambda values: ctx.new_path(table, values))
        return self._direct_write(ctx, table, snapshot, df)

    def _direct_write(self, ctx: "OpContext", table: str, snapshot: Snapshot, df: "DataFrame") -> list[AddFile]:
        from pyspark.sql import functions as F

        parts = list(snapshot.partition_columns)
        stage_rel = f"{STAGING}/part-{ctx.txn.id}-{ctx.step:04d}-{ctx.attempt}-s{uuid.uuid4().hex[:8]}"
        stage_key = f"{table}/{stage_rel}"
        stage_url = self.url(stage_key)
        moved: list[str] = []
        try:
            with spark_errors(f"writing to {table!r}"):
                w = df.repartition(*[_col(p) for p in parts]) if parts else df
                writer = w.write.mode("error").option("mapreduce.fileoutputcommitter.marksuccessfuljobs",
                                                              "false")
                if parts:
                    writer = writer.partitionBy(*parts)
                writer.parquet(stage_url)
            staged = self._staged_files(stage_key)
            if not staged:
                return []
            aggs, decode = _stats_aggregates(snapshot.schema, parts)
            with spark_errors(f"computing stats of the files written to {table!r}"):
                back = (self.spark.read.schema(spark_schema(snapshot.schema)).option("basePath", stage_url)
                        .parquet(*[self.url(f"{stage_key}/{k}") for k in staged]))
                rows = back.groupBy(F.col("_metadata.file_path").alias("f")).agg(*aggs).collect()
            stage_raw = self._raw(stage_key) + "/"
            adds: list[AddFile] = []
            for row in rows:
                src = self._decoded(row["f"])
                if not src.startswith(stage_raw):
                    raise EngineError(f"Spark reported an unexpected staged file {row['f']!r}")
                values, stats = decode(row)
                rel = ctx.new_path(table, values)
                self._move(f"{stage_key}/{src[len(stage_raw):]}", f"{table}/{rel}")
                moved.append(f"{table}/{rel}")
                adds.append(AddFile(rel, values, int(row["size"]), now_ms(), True, stats))
            return adds
        except BaseException:
            for key in moved:
                with contextlib.suppress(LvError, OSError):
                    self.store.delete(key)
            raise
        finally:
            self._drop_staging(stage_key)

    def _staged_files(self, stage_key: str) -> list[str]:
        """Parquet files Spark left in the staging folder (relative to it)."""
        if self.store.scheme == "file":
            root = _local_root(self.store) / stage_key
            out = []
            for dirpath, _dirs, names in os.walk(root):
                for n in names:
                    if n.endswith(".parquet") and not n.startswith((".", "_")):
                        out.append(os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/"))
            return sorted(out)
        return sorted(m.key[len(stage_key) + 1:] for m in self.store.list(stage_key + "/")
                      if m.key.endswith(".parquet") and not m.key.rsplit("/", 1)[-1].startswith((".", "_")))

    def _move(self, src: str, dst: str) -> None:
        """Give a staged file its final name (never replacing an existing object)."""
        if self.store.scheme == "file":
            root = _local_root(self.store)
            s, d = root / src, root / dst
            for _ in range(20):  # a concurrent delete may prune the (empty) partition folder
                d.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(s, d)
                    break
                except FileNotFoundError:
                    if not s.exists():
                        raise
            else:
                raise EngineError(f"could not move {src} to {dst}: its folder keeps disappearing")
            os.unlink(s)
            return
        inner = self.store
        while hasattr(inner, "inner"):
            inner = inner.inner
        client = getattr(inner, "_client", None)
        if client is None:
            raise EngineError(f"the direct data path cannot move files in {self.store!r}; use data_path='arrow'")
        # Server-side copy: the bytes never pass through this client.
        client.copy_object(Bucket=inner.bucket, Key=inner._full(dst),
                           CopySource={"Bucket": inner.bucket, "Key": inner._full(src)})
        self.store.delete(src)

    def _drop_staging(self, stage_key: str) -> None:
        if self.store.scheme == "file":
            root = _local_root(self.store)
            shutil.rmtree(root / stage_key, ignore_errors=True)
            with contextlib.suppress(OSError):
                (root / stage_key).parent.rmdir()  # _lv_staging, when no other operation is writing
            return
        with contextlib.suppress(LvError):
            for m in list(self.store.list(stage_key + "/")):
                self.store.delete(m.key)

    # -- client data -------------------------------------------------------------------------
    def write_arrow(self, ctx: "OpContext", table: str, data: pa.Table) -> list[AddFile]:
        """Write rows already held by this client with pyarrow (both data paths)."""
        return write_data_files(self.store, table, ctx.snapshot(table), data,
                                new_path=lambda values: ctx.new_path(table, values))
