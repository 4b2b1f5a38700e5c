"""Per-file Delta stats computed by one Spark aggregate, and Arrow fix-ups for data coming from Spark.

:func:`stats_aggregates` yields, for files grouped by ``_metadata.file_path``, numRecords, minValues,
maxValues and nullCount exactly as :func:`lv_core.delta.stats.compute_stats` computes them for Arrow
data (same rules: no bounds for NaN/infinite floats, booleans, binary, decimals over 15 digits; string
minima cut to 32 characters and longer maxima left out; timestamps to milliseconds, minimum rounded
down, maximum up), plus each file's size and partition values. Only one row per file reaches Python.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType
from lv_core.delta.stats import STRING_STATS_PREFIX, serialize_partition_value, timestamp_bounds
from lv_core.engine.spark_schema import col

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["stats_aggregates", "unmask"]

_NUM_INDEXED_COLS = 32  # as compute_stats
_INTS = ("byte", "short", "integer", "long")


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
        elif t in _INTS:
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


def stats_aggregates(schema: DeltaSchema,
                     parts: Sequence[str]) -> tuple[list["Column"], Callable[[Any], tuple[dict, str]]]:
    """Aggregate columns computing, per file, numRecords/minValues/maxValues/nullCount exactly as
    :func:`lv_core.delta.stats.compute_stats` does for Arrow data, plus size and partition values.
    Returns the columns and a decoder ``row -> (partition values, stats JSON)``."""
    from pyspark.sql import functions as F

    lower_parts = {p.lower() for p in parts}
    data = [f for f in schema if f.name.lower() not in lower_parts][:_NUM_INDEXED_COLS]
    aggs: list[Column] = [F.count(F.lit(1)).alias("n"), F.first("_metadata.file_size").alias("size")]
    plan: list[tuple[_Leaf, int]] = []
    for leaf in _leaves(data):
        e = col(leaf.path[0])
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
        e = F.first(col(f.name))
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
        return timestamp_bounds(lo, hi, kind == "timestamp")
    return lo, hi


def _zero(t: pa.DataType) -> Optional[pa.Scalar]:
    try:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return pa.scalar("", t)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return pa.scalar(b"", t)
        if pa.types.is_boolean(t):
            return pa.scalar(False, t)
        if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
            return pa.scalar(0, pa.int64()).cast(t)
        if pa.types.is_decimal(t):
            return pa.scalar(0, pa.int64()).cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return None


def unmask(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Arrow from Spark leaves nulls in the fields of a null struct; fill those slots (never real
    values) so casting to a struct with NOT NULL fields works. Primitive and struct fields only."""
    if not (pa.types.is_struct(arr.type) and pa.types.is_struct(target)) or arr.null_count == 0:
        return arr
    valid = arr.is_valid()
    children = []
    for i in range(target.num_fields):
        tf = target.field(i)
        child = unmask(arr.field(i), tf.type)
        zero = _zero(child.type)
        if not tf.nullable and child.null_count and zero is not None:
            child = pc.if_else(pc.and_(pc.invert(valid), pc.is_null(child)), zero, child)
        children.append(child)
    fields = [pa.field(arr.type.field(i).name, c.type, True) for i, c in enumerate(children)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=pc.invert(valid))
