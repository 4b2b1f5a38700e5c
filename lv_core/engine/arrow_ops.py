"""File-level operations computed through the client with pyarrow (no Spark).

Used by the protocol tests and as the engine's client path. Predicates are Python callables over an
Arrow table returning a boolean mask, so an operation is re-executable for redo. Every data file
read is recorded as read; scans are predicate reads (new files may match).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from lv_core.delta.actions import AddFile
from lv_core.delta.colmap import column_mapping
from lv_core.delta.writer import write_data_files
from lv_core.engine.arrow_io import read_data_files
from lv_core.txn.context import OpContext
from lv_core.txn.ops import Operation, OpResult

Mask = Callable[[pa.Table], Any]  # -> pyarrow boolean array / ChunkedArray
Update = Callable[[pa.Table], pa.Table]  # matching rows -> updated rows (same schema)
#: Whether a data file may hold matching rows (from its statistics): only those files are read, and the
#: operation declares it to conflict detection as its predicate read, so a predecessor's new file that
#: cannot hold such rows does not conflict. None: every file is read and any new file may match.
FileFilter = Callable[[AddFile], bool]


def _write(ctx: OpContext, table: str, data: pa.Table, rows_per_file: int | None = None) -> list:
    return write_data_files(ctx.store, table, ctx.snapshot(table), data, max_rows_per_file=rows_per_file,
                            new_path=lambda values: ctx.new_path(table, values))


def append(table: str, data: pa.Table, *, rows_per_file: int | None = None) -> Operation:
    """Blind append of ``data`` (never conflicts), in files of at most ``rows_per_file`` rows."""

    def run(ctx: OpContext) -> OpResult:
        return OpResult(value=data.num_rows, adds={table: _write(ctx, table, data, rows_per_file)})

    return Operation("append", (table,), run, logical={"append_rows": data.num_rows}, blind=True)


def _candidates(ctx: OpContext, table: str, files: FileFilter | None) -> list[AddFile]:
    return [f for f in ctx.files(table).values() if files is None or files(f)]


def _predicate(table: str, files: FileFilter | None) -> dict[str, FileFilter]:
    return {} if files is None else {table: files}


def read(table: str, where: Mask | None = None, *, exposed: bool = True, files: FileFilter | None = None,
         logical: dict | None = None) -> Operation:
    """Read the rows of ``table`` (matching ``where``, in the files ``files`` keeps) as an Arrow table."""

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        got = _candidates(ctx, table, files)
        data = read_data_files(ctx.store, table, got, snap.schema, snap.partition_columns, column_mapping(snap))
        if where is not None:
            data = data.filter(where(data))
        return OpResult(value=data, reads={table: {f.path for f in got}}, scans={table},
                        may_match=_predicate(table, files))

    return Operation("read", (table,), run, logical=logical or {"read": table}, exposed=exposed, reads_only=True)


def _rewrite(table: str, where: Mask, set_rows: Update | None,
             files: FileFilter | None = None) -> Callable[[OpContext], OpResult]:
    """Copy-on-write: rewrite each file (of those ``files`` keeps) holding matching rows (updated by
    ``set_rows``, or dropped)."""

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        res = OpResult(value=0, reads={table: set()}, scans={table}, adds={table: []}, removes={table: []},
                       may_match=_predicate(table, files))
        for f in _candidates(ctx, table, files):
            data = read_data_files(ctx.store, table, [f], snap.schema, snap.partition_columns, column_mapping(snap))
            res.reads[table].add(f.path)
            mask = where(data)
            n = pc.sum(mask).as_py() or 0
            if not n:
                continue
            out = data.filter(pc.invert(mask))
            if set_rows is not None:
                out = pa.concat_tables([out, set_rows(data.filter(mask)).cast(out.schema)])
            if out.num_rows:
                res.adds[table].extend(_write(ctx, table, out))
            res.removes[table].append(f.remove())
            res.value += n
        return res

    return run


def update(table: str, where: Mask, set_rows: Update, *, logical: dict | None = None,
           files: FileFilter | None = None) -> Operation:
    """Copy-on-write UPDATE; value = rows affected."""
    return Operation("update", (table,), _rewrite(table, where, set_rows, files),
                     logical=logical or {"update": table})


def delete(table: str, where: Mask, *, logical: dict | None = None, files: FileFilter | None = None) -> Operation:
    """Copy-on-write DELETE; value = rows deleted."""
    return Operation("delete", (table,), _rewrite(table, where, None, files), logical=logical or {"delete": table})


def eq(column: str, value: Any) -> Mask:
    """Mask helper: ``column == value``."""
    return lambda t: pc.fill_null(pc.equal(t[column], value), False)


def add_to(column: str, delta: float) -> Update:
    """Update helper: ``column = column + delta``."""

    def f(rows: pa.Table) -> pa.Table:
        i = rows.schema.get_field_index(column)
        return rows.set_column(i, column, pc.add(rows[column], pa.scalar(delta, rows.schema.field(column).type)))

    return f


def set_value(column: str, value: Any) -> Update:
    """Update helper: ``column = value``."""

    def f(rows: pa.Table) -> pa.Table:
        i = rows.schema.get_field_index(column)
        return rows.set_column(i, column, pa.array([value] * rows.num_rows, type=rows.schema.field(column).type))

    return f
