"""Transaction operations computed by Spark: read, INSERT, and copy-on-write UPDATE/DELETE.

Each function returns a re-executable :class:`~lv_core.txn.ops.Operation`: ``run(ctx)`` works on the
transaction's current view of the table (``ctx.files``: base snapshot plus its own writes), so a redo
on a newer snapshot recomputes the effect. SQL texts (``where``, ``set``) are Spark SQL expressions.

UPDATE/DELETE: files whose stats/partition values exclude ``where`` are skipped without reading them
(:mod:`lv_core.engine.skipping`); one Spark query over the remaining candidates finds the files that
really hold matching rows (by ``_metadata.file_path``) and counts them; only those files are rewritten
(``remove`` + ``add``). ``reads`` = the candidates (data actually read), ``scans`` = the table, and
``may_match`` = the same stats test, so a predecessor's new file conflicts only if it may hold rows
the predicate selects.

Reads (``txn.table``) are *exposed*: the caller gets a lazy DataFrame over a fixed list of immutable
data files. Its value for redo comparison is :class:`TableRead`, equal when the same files are read:
same files means the same rows, so a redo that reads other files counts as a change (conservative:
it may abort a transaction whose rows happen to be equal, never miss a change). The DataFrame stays
valid as long as its files exist: committed files until a vacuum (as any Delta time-travel read), files
this transaction staged until it rolls back, or, for a staged file its own later statement replaced,
until it commits (such files are deleted then). On the arrow path the rows already live in Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import pyarrow as pa

from lv_core.delta.colmap import column_mapping
from lv_core.delta.dv import live_records
from lv_core.delta.features import check_identity_update, check_writable
from lv_core.delta.schema import DeltaSchema
from lv_core.delta.writer import conform
from lv_core.engine import cdf
from lv_core.engine.skipping import file_filter
from lv_core.engine.spark_io import FILE_COL, SparkEngine
from lv_core.engine.spark_schema import NOT_NULL_TAG, col, nullable_type, spark_errors, spark_schema
from lv_core.errors import ConfigError, EngineError, SchemaError
from lv_core.txn.context import OpContext
from lv_core.txn.ops import Operation, OpResult

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["TableRead", "delete", "insert", "read", "rows_to_arrow", "update"]


@dataclass(eq=False)
class TableRead:
    """What a read returned: the DataFrame and the exact files behind it (the redo-comparable part)."""

    table: str
    version: int  #: the base snapshot version it was read on
    files: frozenset[tuple[str, int]]  #: (path, size) of every data file read
    df: "DataFrame" = field(repr=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableRead) and (self.table, self.files) == (other.table, other.files)

    __hash__ = None  # type: ignore[assignment]


def read(engine: SparkEngine, table: str) -> Operation:
    """The table as the transaction sees it (read-your-writes), as a DataFrame with its exact schema."""

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        files = sorted(ctx.files(table).values(), key=lambda f: f.path)
        df = engine.read(table, snap, files)
        value = TableRead(table, snap.version, frozenset((f.path, f.size) for f in files), df)
        return OpResult(value=value, reads={table: {f.path for f in files}}, scans={table})

    return Operation("read", (table,), run, logical={"read": table}, exposed=True, reads_only=True)


def rows_to_arrow(rows: list, schema: DeltaSchema, table: str) -> pa.Table:
    """A list of dicts as an Arrow table of the table's schema (missing keys -> null).

    Raises:
        SchemaError: a key that is not a column, or a value that does not fit its column.
        ConfigError: an element that is not a mapping.
    """
    target = schema.to_arrow()
    names = {f.name.lower(): f.name for f in target}
    seen: set[str] = set()
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise ConfigError(f"row {i} is a {type(r).__name__}; insert a list of dicts (column -> value)")
        seen.update(str(k) for k in r)
    extra = sorted(k for k in seen if k.lower() not in names)
    if extra:
        raise SchemaError(f"table {table!r} has no column(s) {', '.join(map(repr, extra))}; "
                          f"its columns are {', '.join(target.names)}")
    lookup = {k: names[k.lower()] for k in seen}
    norm = [{lookup[str(k)]: v for k, v in r.items()} for r in rows]
    arrays = []
    for f in target:
        values = [r.get(f.name) for r in norm]
        try:
            arrays.append(pa.array(values, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as e:
            raise SchemaError(f"column {f.name!r} of {table!r} is {f.type}: {e}") from None
    return conform(pa.Table.from_arrays(arrays, names=target.names), target)


Insertable = Union["DataFrame", pa.Table, list]


def insert(engine: SparkEngine, table: str, data: Insertable) -> Operation:
    """Blind append. ``data``: a Spark DataFrame (written by Spark, or through the client on the arrow
    path), a pyarrow Table or a list of dicts (already on this client: written with pyarrow)."""

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        check_writable(snap.protocol, snap.metadata, table=table)  # refuse before converting any row
        if isinstance(data, list):
            arrow = rows_to_arrow(data, snap.schema, table)
        elif isinstance(data, pa.Table):
            arrow = conform(data, snap.schema.to_arrow())
        else:
            adds = engine.write(ctx, table, data)
            res = OpResult(value=sum(a.num_records or 0 for a in adds), adds={table: adds})
            if cdf.enabled(snap):
                res.cdc, res.cdc_implied = {table: engine.write_inserted(ctx, table, adds)}, {table}
            return res
        res = OpResult(value=arrow.num_rows, adds={table: engine.write_arrow(ctx, table, arrow)})
        if cdf.enabled(snap):
            res.cdc, res.cdc_implied = {table: engine.write_arrow_inserted(ctx, table, arrow)}, {table}
        return res

    return Operation("insert", (table,), run, logical={"insert": table}, blind=True)


def _resolve_set(assignments: Mapping[str, str], schema: DeltaSchema, table: str) -> dict[str, str]:
    if not assignments:
        raise ConfigError("UPDATE needs at least one assignment: set={'column': 'expression'}")
    out: dict[str, str] = {}
    for k, v in assignments.items():
        try:
            name = schema.field(str(k)).name
        except SchemaError:
            raise SchemaError(f"UPDATE {table}: no column {k!r}; its columns are {', '.join(schema.names)}") from None
        if name in out:
            raise ConfigError(f"UPDATE {table}: column {name!r} is assigned twice")
        if not isinstance(v, str):
            v = _sql_literal(v)
        out[name] = v
    return out


def _sql_literal(v: Any) -> str:
    """A Python value given instead of an expression, as a SQL literal (None, bool, int, float, str)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return repr(v)
    raise ConfigError(f"UPDATE values must be SQL expression strings (or None/bool/int/float), not {v!r}")


def _dml(engine: SparkEngine, table: str, where: Optional[str], assignments: Optional[Mapping[str, str]],
         logical: dict) -> Operation:
    from pyspark.sql import functions as F

    is_update = assignments is not None
    what = f"{'UPDATE' if is_update else 'DELETE FROM'} {table}"

    def run(ctx: OpContext) -> OpResult:
        snap = ctx.snapshot(table)
        sets = _resolve_set(assignments, snap.schema, table) if assignments is not None else {}  # = is_update
        check_identity_update(snap.metadata, sets, table)
        view = ctx.files(table)
        may_match = file_filter(where, snap.schema, snap.partition_columns, column_mapping(snap).names)
        candidates = sorted((f for f in view.values() if may_match(f)), key=lambda f: f.path)
        res = OpResult(value=0, reads={table: {f.path for f in candidates}}, scans={table},
                       may_match={table: may_match}, adds={table: []}, removes={table: []})
        if not candidates:
            return res
        changes = cdf.enabled(snap)
        if not is_update and where is None and not changes and all(f.num_records is not None for f in candidates):
            res.reads[table] = set()  # DELETE of everything: metadata only, like Delta
            res.removes[table] = [f.remove() for f in candidates]
            res.value = sum(live_records(f) or 0 for f in candidates)
            return res
        cache: dict[str, pa.Table] = {}
        with spark_errors(what):
            cond = F.expr(where) if where is not None else F.lit(True)
            hits = (engine.scan(table, snap, candidates, file_col=True, cache=cache)
                    .where(cond).groupBy(FILE_COL).count().collect())
        resolve = engine.file_of(table, candidates)
        touched: dict[str, int] = {}
        for row in hits:
            path = resolve(row[FILE_COL])
            if path is None:
                raise EngineError(f"{what}: Spark reported rows from an unknown file {row[FILE_COL]!r}")
            touched[path] = int(row["count"])
        if not touched:
            return res
        files = [view[p] for p in sorted(touched)]
        with spark_errors(what):
            cdf.check_staged(engine, ctx, table, files, lambda staged: engine.scan(table, snap, staged, cache=cache)
                             .where(F.coalesce(cond, F.lit(False))), what)
        target = spark_schema(snap.schema)
        with spark_errors(what):
            src = engine.scan(table, snap, files, cache=cache)
            if is_update:
                cols = []
                for f in target.fields:
                    c = col(f.name)
                    if f.name in sets:
                        new = F.expr(sets[f.name]).cast(nullable_type(f.dataType))
                        if not f.nullable:
                            msg = f"{NOT_NULL_TAG} UPDATE {table}: column {f.name!r} is NOT NULL; SET gave a null"
                            new = F.when(new.isNull(), F.raise_error(F.lit(msg))).otherwise(new)
                        c = F.when(cond, new).otherwise(c)
                    cols.append(c.alias(f.name))
                out = src.select(*cols)
            else:
                out = src.where(~F.coalesce(cond, F.lit(False)))
            adds = engine.write(ctx, table, out, conformed=True, rewrite=True, like=files)
            if changes:  # the matched rows of the same scan: before/after, or deleted
                hit = src.where(F.coalesce(cond, F.lit(False)))
                old = [col(f.name) for f in target.fields]
                rows = (cdf.tagged(hit, old, "update_preimage").unionByName(cdf.tagged(hit, cols, "update_postimage"))
                        if is_update else cdf.tagged(hit, old, "delete"))
                res.cdc[table] = engine.write_changes(ctx, table, rows)
        res.adds[table] = adds
        res.removes[table] = [f.remove() for f in files]
        res.value = sum(touched.values())
        return res

    name = "update" if is_update else "delete"
    return Operation(name, (table,), run, logical=logical)


def update(engine: SparkEngine, table: str, assignments: Mapping[str, str], where: Optional[str] = None) -> Operation:
    """Copy-on-write ``UPDATE table SET k = expr, ... [WHERE where]``; value = rows updated."""
    logical = {"update": table, "set": {str(k): v for k, v in assignments.items()}, "where": where}
    return _dml(engine, table, where, dict(assignments), logical)


def delete(engine: SparkEngine, table: str, where: Optional[str] = None) -> Operation:
    """Copy-on-write ``DELETE FROM table [WHERE where]``; value = rows deleted."""
    return _dml(engine, table, where, None, {"delete": table, "where": where})
