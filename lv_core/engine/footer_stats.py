"""Delta stats and partition values of files Spark just wrote, from their Parquet footers.

A write on the direct path must not read its output again: the footer of each file already holds
the row count and, per column chunk, the null count and the minimum and maximum (Spark's Parquet
writer orders doubles with NaN greatest and keeps whole string bounds). :func:`footer_stats` turns
them into exactly the stats :func:`lv_core.delta.stats.compute_stats` writes for the same rows (no
bounds for NaN/infinite floats, booleans, binary, decimals over 15 digits; strings cut to their
32-character prefix, longer maxima left out; timestamps to milliseconds, outward), or ``None`` when a
column's footer cannot give them (a list or map column, whose null count Parquet does not keep; an
unexpected physical layout): the caller then computes the stats with a Spark aggregate.
:func:`folder_values` reads partition values back from the Hive-style folders Spark wrote.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import math
import urllib.parse
from typing import Any, Optional, Sequence

import pyarrow.parquet as pq

from lv_core.delta.paths import HIVE_NULL
from lv_core.delta.schema import ArrayType, DeltaSchema, MapType, StructType
from lv_core.delta.stats import STRING_STATS_PREFIX, nest_struct, timestamp_bounds
from lv_core.storage.base import ObjectStore

__all__ = ["FOLDER_TYPES", "footer_stats", "folder_values", "read_footer"]

_NUM_INDEXED_COLS = 32  # as compute_stats
_INTS = ("byte", "short", "integer", "long")
_TAIL = 64 * 1024  # one ranged GET holds the footer of almost every file
#: Partition column types whose Spark folder text is already the Delta partition value text.
FOLDER_TYPES = frozenset(_INTS + ("string", "date", "boolean"))
_EPOCH_DAY = dt.date(1970, 1, 1)


class _Unusable(Exception):
    """The footer cannot give this column's stats."""


def read_footer(store: ObjectStore, key: str, size: int) -> pq.FileMetaData:
    """The footer of the Parquet object ``key`` (``size`` bytes) with one ranged GET (two for a footer
    over 64 KiB): the file's bytes never pass through this process."""
    start = max(0, size - _TAIL)
    tail = store.get(key, byte_range=(start, size)).data
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise ValueError(f"{key!r} is not a Parquet file")
    need = int.from_bytes(tail[-8:-4], "little") + 8
    if need > len(tail):
        start = size - need
        tail = store.get(key, byte_range=(start, size)).data
    return pq.read_metadata(_Tail(tail, size))


class _Tail(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only the last ``len(data)`` are known."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data, self._size, self._pos = data, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        first = self._size - len(self._data)
        if self._pos < first:
            raise OSError("only the footer of this file was fetched")
        chunk = self._data[self._pos - first:self._pos - first + len(b)]
        b[:len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def footer_stats(md: pq.FileMetaData, schema: DeltaSchema, parts: Sequence[str]) -> Optional[str]:
    """The ``stats`` JSON of a file Spark wrote with the table's physical ``schema`` (partition columns
    ``parts`` not in the file), or None when the footer cannot give it exactly."""
    if not (md.created_by or "").startswith("parquet-mr"):
        return None  # other writers (pyarrow) leave NaN out of float bounds: only Spark's writer is read
    chunks: dict[str, list[Any]] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            chunks.setdefault(col.path_in_schema, []).append(col)
    lower_parts = {p.lower() for p in parts}
    data = [f for f in schema if f.name.lower() not in lower_parts][:_NUM_INDEXED_COLS]
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    try:
        for f in data:
            _field(f.name, f.type, (f.name,), chunks, md.num_rows, mins, maxs, nulls)
    except _Unusable:
        return None
    return json.dumps({"numRecords": md.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      separators=(",", ":"), ensure_ascii=False)


def _field(name: str, t: Any, path: tuple[str, ...], chunks: dict[str, list[Any]], rows: int,
           mins: dict, maxs: dict, nulls: dict) -> None:
    if "." in name:
        raise _Unusable(name)  # Parquet joins column paths with dots: the chunk would be ambiguous
    if isinstance(t, StructType):
        lo: dict[str, Any] = {}
        hi: dict[str, Any] = {}
        nn: dict[str, Any] = {}
        for sub in t.fields:
            _field(sub.name, sub.type, path + (sub.name,), chunks, rows, lo, hi, nn)
        nest_struct(name, (lo, hi, nn), (mins, maxs, nulls))
        return
    if isinstance(t, (ArrayType, MapType)):
        raise _Unusable(name)  # Parquet counts null elements, Delta null lists
    cols = chunks.get(".".join(path))
    if not cols and rows:
        raise _Unusable(name)
    stats = [c.statistics for c in cols or ()]
    if any(s is None or not s.has_null_count for s in stats):
        raise _Unusable(name)
    nulls[name] = sum(s.null_count for s in stats)
    kind = _kind(t)
    if kind is None:
        return
    bounds = []
    for c, s in zip(cols or (), stats, strict=True):
        if s.null_count == c.num_values:
            continue  # an all-null chunk has no bounds and needs none
        if not s.has_min_max:
            return  # values without bounds: leave both out (always safe)
        bounds.append((s.min_raw, s.max_raw, c.physical_type))
    if not bounds:
        return
    lo_v, hi_v = _bounds(kind, t, bounds)
    if lo_v is not None:
        mins[name] = lo_v
    if hi_v is not None:
        maxs[name] = hi_v


def _kind(t: Any) -> Optional[str]:
    if t in _INTS:
        return "int"
    if t in ("float", "double", "string", "date", "timestamp", "timestamp_ntz"):
        return str(t)
    if isinstance(t, str) and t.startswith("decimal"):
        return "decimal" if int(t[t.index("(") + 1:t.index(",")]) <= 15 else None
    return None  # booleans, binary: null counts only


def _bounds(kind: str, t: Any, bounds: list[tuple[Any, Any, str]]) -> tuple[Any, Any]:
    phys = {p for _lo, _hi, p in bounds}
    want = {"int": {"INT32", "INT64"}, "date": {"INT32"}, "timestamp": {"INT64"}, "timestamp_ntz": {"INT64"},
            "float": {"FLOAT"}, "double": {"DOUBLE"}, "string": {"BYTE_ARRAY"},
            "decimal": {"INT32", "INT64"}}[kind]
    if not phys <= want:
        raise _Unusable(kind)
    los = [lo for lo, _hi, _p in bounds]
    his = [hi for _lo, hi, _p in bounds]
    if kind in ("float", "double"):
        if not all(math.isfinite(v) for v in los + his):
            return None, None  # Spark orders NaN greatest: a NaN shows as a NaN maximum
        return float(min(los)), float(max(his))
    if kind == "string":
        try:
            lo_s = min(los).decode("utf-8")
            hi_s = max(his).decode("utf-8")
        except UnicodeDecodeError:
            raise _Unusable(kind) from None
        return lo_s[:STRING_STATS_PREFIX], (hi_s if len(hi_s) <= STRING_STATS_PREFIX else None)
    lo, hi = min(los), max(his)
    if kind == "int":
        return lo, hi
    if kind == "date":
        return ((_EPOCH_DAY + dt.timedelta(days=lo)).isoformat(), (_EPOCH_DAY + dt.timedelta(days=hi)).isoformat())
    if kind in ("timestamp", "timestamp_ntz"):
        return timestamp_bounds(lo, hi, kind == "timestamp")
    scale = int(t[t.index(",") + 1:t.index(")")])  # decimal: unscaled integers
    return float(decimal.Decimal(lo).scaleb(-scale)), float(decimal.Decimal(hi).scaleb(-scale))


def folder_values(rel: str, parts: Sequence[str]) -> Optional[dict[str, Optional[str]]]:
    """Partition values of a file Spark wrote at ``rel`` (``p=v/q=w/part-...``, relative to the write's
    folder) for columns ``parts`` in that order; None if the folders do not name exactly them."""
    folders = rel.split("/")[:-1]
    if len(folders) != len(parts):
        return None
    out: dict[str, Optional[str]] = {}
    for folder, p in zip(folders, parts, strict=True):
        name, sep, text = folder.partition("=")
        try:
            name, text = urllib.parse.unquote(name, errors="strict"), urllib.parse.unquote(text, errors="strict")
        except UnicodeDecodeError:
            return None
        if not sep or name != p:
            return None
        out[p] = None if text == HIVE_NULL else text
    return out
