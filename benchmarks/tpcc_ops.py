"""TPC-C's statements as LakeVilla operations (the operations API, pyarrow, no Spark).

Every statement names the rows it touches by a ``Where``: column -> a value (equality), a
``(lo, hi)`` tuple (inclusive range) or a frozenset (IN list). The same ``Where`` gives

- the row mask (what an SQL engine's filter would keep), and
- the files that may hold such rows, from each data file's min/max statistics (data skipping, as
  Spark and delta-rs do), declared to LakeVilla's conflict detection as the predicate read
  (``may_match``), so statements on different keys in different files do not conflict.

SELECTs are *exposed* reads (the TPC-C program uses the values it reads, e.g. New-Order's
``d_next_o_id`` becomes the new order's id), UPDATEs write values the client computed (as the
specification's embedded-SQL programs do: ``SET s_quantity = :s_quantity``) or apply a function of
the current rows, DELETEs drop the matching rows, INSERTs are blind appends. The operations are
``lv_core.engine.arrow_ops``' own (copy-on-write per file), given the ``Where``'s mask and file filter.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Union

import pyarrow as pa
import pyarrow.compute as pc

from lv_core.engine import arrow_ops
from lv_core.txn.ops import Operation

Cond = Union[int, str, tuple, frozenset]
Where = Mapping[str, Cond]
SetRows = Callable[[pa.Table], pa.Table]  # matching rows -> the same rows updated

__all__ = ["Where", "delete", "file_match", "insert", "select", "set_by_key", "set_columns", "update"]

_STATS: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]] | None] = {}


def _bounds(table: str, add: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The file's (minValues, maxValues), parsed once per file (files are immutable)."""
    key = (table, add.path)
    if key not in _STATS:
        s = json.loads(add.stats) if add.stats else {}
        _STATS[key] = (s["minValues"], s["maxValues"]) if "minValues" in s and "maxValues" in s else None
    return _STATS[key]


def _span(cond: Cond) -> tuple[Any, Any]:
    if isinstance(cond, tuple):
        return cond[0], cond[1]
    if isinstance(cond, frozenset):
        return min(cond), max(cond)
    return cond, cond


def file_match(table: str, where: Where) -> Callable[[Any], bool]:
    """Whether a data file's statistics allow a row matching ``where`` (no statistics: it may)."""
    spans = {c: _span(v) for c, v in where.items()}

    def match(add: Any) -> bool:
        b = _bounds(table, add)
        if b is None:
            return True
        lo_v, hi_v = b
        for c, (lo, hi) in spans.items():
            flo, fhi = lo_v.get(c), hi_v.get(c)
            if flo is not None and fhi is not None and (fhi < lo or flo > hi):
                return False
        return True

    return match


def _mask(data: pa.Table, where: Where) -> Any:
    m = pa.array([True] * data.num_rows, pa.bool_())
    for c, v in where.items():
        if isinstance(v, tuple):
            cm = pc.and_(pc.greater_equal(data[c], v[0]), pc.less_equal(data[c], v[1]))
        elif isinstance(v, frozenset):
            cm = pc.is_in(data[c], value_set=pa.array(sorted(v), data.schema.field(c).type))
        else:
            cm = pc.equal(data[c], v)
        m = pc.and_(m, pc.fill_null(cm, False))
    return m


def _sql(where: Where) -> str:
    parts = []
    for c, v in where.items():
        if isinstance(v, tuple):
            parts.append(f"{c} BETWEEN {v[0]} AND {v[1]}")
        elif isinstance(v, frozenset):
            parts.append(f"{c} IN ({', '.join(str(x) for x in sorted(v))})")
        else:
            parts.append(f"{c} = {v!r}")
    return " AND ".join(parts) or "TRUE"


def _where_mask(where: Where) -> Callable[[pa.Table], Any]:
    return lambda data: _mask(data, where)


def select(table: str, where: Where, *, exposed: bool = True) -> Operation:
    """``SELECT * FROM table WHERE ...`` as an Arrow table."""
    return arrow_ops.read(table, _where_mask(where), exposed=exposed, files=file_match(table, where),
                          logical={"sql": f"SELECT * FROM {table} WHERE {_sql(where)}"})


def update(table: str, where: Where, set_rows: SetRows, sql_set: str) -> Operation:
    """``UPDATE table SET <sql_set> WHERE ...``; value = rows updated."""
    return arrow_ops.update(table, _where_mask(where), set_rows, files=file_match(table, where),
                            logical={"sql": f"UPDATE {table} SET {sql_set} WHERE {_sql(where)}"})


def delete(table: str, where: Where) -> Operation:
    """``DELETE FROM table WHERE ...``; value = rows deleted."""
    return arrow_ops.delete(table, _where_mask(where), files=file_match(table, where),
                            logical={"sql": f"DELETE FROM {table} WHERE {_sql(where)}"})


def insert(table: str, rows: pa.Table) -> Operation:
    """``INSERT INTO table VALUES ...`` (a blind append: one new data file)."""
    return arrow_ops.append(table, rows)


def set_columns(values: Mapping[str, Any]) -> SetRows:
    """Rows -> the same rows with ``values`` (column -> one literal for every row)."""

    def f(rows: pa.Table) -> pa.Table:
        for c, v in values.items():
            i = rows.schema.get_field_index(c)
            rows = rows.set_column(i, c, pa.array([v] * rows.num_rows, rows.schema.field(c).type))
        return rows

    return f


def set_by_key(key: str, values: Mapping[str, Mapping[Any, Any]]) -> SetRows:
    """Rows -> the same rows with column ``c`` set to ``values[c][row[key]]`` (a literal per row)."""

    def f(rows: pa.Table) -> pa.Table:
        keys = rows[key].to_pylist()
        for c, by_key in values.items():
            i = rows.schema.get_field_index(c)
            rows = rows.set_column(i, c, pa.array([by_key[k] for k in keys], rows.schema.field(c).type))
        return rows

    return f
